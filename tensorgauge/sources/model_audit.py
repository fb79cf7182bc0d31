"""``tensorgauge devices PATH``: where a saved model's weights and ops run.

The model is loaded in a subprocess (:mod:`tensorgauge.sources.model_audit_job`), so
TensorFlow's device placement log can be captured from a fresh process and a
broken model cannot take the command down. The subprocess sends back raw
facts (variables, placed ops, timed ops, devices); :mod:`tensorgauge.analyse.placement`
summarises them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tensorgauge.errors import TensorgaugeError

AUDIT_MODULE = "tensorgauge.sources.model_audit_job"
TIMEOUT_SECONDS = 600


def model_format(path: Path) -> str:
    """'savedmodel', 'keras' or 'h5'; a clear error for anything else."""
    if path.is_dir():
        if (path / "saved_model.pb").is_file():
            return "savedmodel"
        raise TensorgaugeError(f"{path} is a directory without saved_model.pb: not a SavedModel")
    if not path.exists():
        raise TensorgaugeError(f"no such file or directory: {path}")
    suffix = path.suffix.lower()
    if suffix == ".keras":
        return "keras"
    if suffix in (".h5", ".hdf5"):
        return "h5"
    raise TensorgaugeError(f"{path}: not a model (expected a SavedModel directory, a .keras or a .h5 file)")


def audit_model(path: str | os.PathLike, device: str | None = None, input_shapes: list[str] | None = None,
          logical_cpus: int | None = None,
          progress: Callable[[str], None] | None = None) -> dict:
    """Load ``path`` in a subprocess and return its raw facts (see the audit module)."""
    path = Path(path)
    fmt = model_format(path)
    if progress:
        progress(f"loading {path} in a subprocess")
    request = {"path": str(path.resolve()), "format": fmt, "device": device,
               "input_shapes": input_shapes or [], "logical_cpus": logical_cpus}
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0", "PYTHONWARNINGS": "ignore"}
    try:
        proc = subprocess.run([sys.executable, "-m", AUDIT_MODULE, json.dumps(request)],
                              capture_output=True, text=True, env=env, timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        raise TensorgaugeError(f"loading {path} took over {TIMEOUT_SECONDS} s; gave up") from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TensorgaugeError(f"the audit of {path} failed (exit {proc.returncode}): {tail}")
    result = json.loads(lines[-1])
    if result.get("error"):
        raise TensorgaugeError(f"{path}: {result['error']}")
    result["format"] = fmt
    return result
