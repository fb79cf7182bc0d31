"""``tensorgauge check RUN --against BASELINE``: exit 0 within the limits, 1 beyond (with the causes),
2 for bad input."""

from __future__ import annotations

import json

from tensorgauge.commands._shared import load_side, write_text
from tensorgauge.commands.baseline import resolve
from tensorgauge.errors import TensorgaugeError


def _share(text: str | None, what: str) -> float | None:
    """'10%' or '0.1' -> 0.1."""
    if text is None:
        return None
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise TensorgaugeError(f"{what}: '{text}' is not a share (examples: 10%, 0.1)") from None
    if not 0 <= value <= 100:
        raise TensorgaugeError(f"{what}: {text} is out of range (0% to 10000%)")
    return value


def check(store: str | None, run: str, against: str, max_slower: str | None = None,
          max_memory_growth: str | None = None, no_new_findings: bool = False, output_format: str = "text",
          output: str | None = None, json_path: str | None = None) -> int:
    from tensorgauge.analyse.check import Limits
    from tensorgauge.analyse.check import check as check_sides
    from tensorgauge.render.check import FORMATS

    if output_format not in FORMATS:
        raise TensorgaugeError(f"--format: choose from {', '.join(FORMATS)}")
    limits = Limits()
    if max_slower is not None:
        limits.max_slower = _share(max_slower, "--max-slower") or 0.0
    if max_memory_growth is not None:
        limits.max_memory_growth = _share(max_memory_growth, "--max-memory-growth") or 0.0
    limits.no_new_findings = no_new_findings
    baseline = load_side(store, resolve(store, against))
    current = load_side(store, run)
    result = check_sides(baseline, current, limits)
    if not result.checks:
        raise TensorgaugeError(f"nothing to check: {current.label} and {baseline.label} share no fit, evaluate or "
                               "predict with steps, nor CPU or memory figures")
    rendered = FORMATS[output_format](result)
    if output:
        write_text(rendered, output)
    else:
        print(rendered, end="")
    if json_path:
        write_text(json.dumps(result.to_dict(), indent=2), json_path)
    return 0 if result.passed else 1
