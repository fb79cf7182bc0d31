"""``tensorgauge devices PATH``: where a saved model's weights and ops run."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

from tensorgauge.commands._shared import console, progress_printer, write_text
from tensorgauge.errors import TensorgaugeError


def devices(path: str, json_path: str | None = None, device: str | None = None,
            input_shapes: list[str] | None = None, logical_cpus: int | None = None) -> int:
    from tensorgauge.analyse.placement import summarise_audit
    from tensorgauge.render.terminal import render_devices
    from tensorgauge.sources.fingerprint import driver_gpus
    from tensorgauge.sources.model_audit import audit_model, model_format

    model_format(Path(path))  # a missing file or a non-model is named first, TensorFlow or not
    if importlib.util.find_spec("tensorflow") is None:
        raise TensorgaugeError("devices needs TensorFlow: pip install 'tensorgauge[tensorflow]'")
    if logical_cpus is not None and not 1 <= logical_cpus <= 64:
        raise TensorgaugeError(f"--logical-cpus must be between 1 and 64, got {logical_cpus}")
    raw = audit_model(path, device=device, input_shapes=input_shapes, logical_cpus=logical_cpus,
                      progress=None if json_path else progress_printer())
    result = summarise_audit({**raw, "path": str(path)}, driver_gpus())
    if json_path:
        write_text(json.dumps(result, indent=2), json_path)
        if json_path == "-":
            return 0
    render_devices(console(), result)
    return 0


VERB = "devices"
HELP = "where a saved model's weights and ops run"
DESCRIPTION = ("Load a SavedModel directory, a .keras or a .h5 file in a subprocess; list its "
               "variables and the device of each, call it once on zeros and list where its "
               "ops ran (counts, top ops by time per device, ops without a GPU kernel).")
USES_STORE = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge devices``."""
    p.add_argument("path", metavar="PATH", help="SavedModel directory, .keras or .h5 file")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="the tensorgauge.devices/1 document, to stdout or PATH")
    p.add_argument("--device", metavar="DEVICE", help="load under tf.device(DEVICE), e.g. /CPU:0 or /GPU:0")
    p.add_argument("--input-shape", action="append", metavar="SHAPE",
                   help="the probe's input shape, e.g. 1,28,28,3 (once per input; default: from the model)")
    p.add_argument("--logical-cpus", type=int, metavar="N",
                   help="split the CPU into N logical devices (to try device scopes without a GPU)")


def main(args: argparse.Namespace) -> int:
    return devices(args.path, args.json, args.device, args.input_shape, args.logical_cpus)
