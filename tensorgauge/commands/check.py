"""``tensorgauge check RUN --against BASELINE``: exit 0 within the limits, 1 beyond (with the causes) or
for a run that did not complete, 2 for bad input."""

from __future__ import annotations

import argparse
import json

from tensorgauge.commands._shared import CommandStore, load_side, resolve_baseline, write_text
from tensorgauge.errors import TensorgaugeError


def _text(value) -> str | None:
    return None if value is None else str(value)


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


CONFIG_KEYS = ("max_slower", "max_memory_growth", "no_new_findings")


def read_config(path: str | None) -> dict:
    """The ``[tool.tensorgauge.check]`` table of ``path`` (default: ./pyproject.toml when there is one)."""
    from pathlib import Path

    file = Path(path) if path else Path("pyproject.toml")
    if not file.is_file():
        if path:
            raise TensorgaugeError(f"--config: no file {path}")
        return {}
    try:
        import tomllib
    except ImportError:  # Python 3.10
        if path:
            raise TensorgaugeError("--config needs Python 3.11 or later (tomllib)") from None
        return {}
    try:
        table = tomllib.loads(file.read_text()).get("tool", {}).get("tensorgauge", {}).get("check", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TensorgaugeError(f"{file}: not readable TOML ({exc})") from None
    unknown = set(table) - set(CONFIG_KEYS)
    if unknown:
        raise TensorgaugeError(f"{file}: [tool.tensorgauge.check] has unknown keys {', '.join(sorted(unknown))} "
                               f"(known: {', '.join(CONFIG_KEYS)})")
    return table


def check(store: str | None, run: str, against: str, max_slower: str | None = None,
          max_memory_growth: str | None = None, no_new_findings: bool = False, output_format: str = "text",
          output: str | None = None, json_path: str | None = None, config: str | None = None) -> int:
    from tensorgauge.analyse.check import Limits
    from tensorgauge.analyse.check import check as check_sides
    from tensorgauge.render.check import FORMATS

    if output_format not in FORMATS:
        raise TensorgaugeError(f"--format: choose from {', '.join(FORMATS)}")
    limits = Limits()
    table = read_config(config)  # the flags win over the file
    max_slower = max_slower if max_slower is not None else _text(table.get("max_slower"))
    max_memory_growth = max_memory_growth if max_memory_growth is not None else _text(table.get("max_memory_growth"))
    no_new_findings = no_new_findings or bool(table.get("no_new_findings", False))
    if max_slower is not None:
        limits.max_slower = _share(max_slower, "--max-slower") or 0.0
    if max_memory_growth is not None:
        limits.max_memory_growth = _share(max_memory_growth, "--max-memory-growth") or 0.0
    limits.no_new_findings = no_new_findings
    with CommandStore(store) as stores:
        baseline = load_side(stores, resolve_baseline(stores, against))
        current = load_side(stores, run)
    result = check_sides(baseline, current, limits)
    if not result.baseline_ended.completed:
        raise TensorgaugeError(f"the baseline {baseline.label} did not complete: it "
                               f"{result.baseline_ended.describe()}; save one from a run that completed")
    if not result.checks and result.ended.completed:  # a cut run fails, with or without figures
        raise TensorgaugeError(f"nothing to check: {current.label} and {baseline.label} share no fit, evaluate or "
                               "predict with steps, nor CPU or memory figures")
    rendered = FORMATS[output_format](result)
    if output:
        write_text(rendered, output, store)
    else:
        print(rendered, end="")
    if json_path:
        write_text(json.dumps(result.to_dict(), indent=2), json_path, store)
    return 0 if result.passed else 1


VERB = "check"
HELP = "fail a run that got slower or heavier than its baseline"
DESCRIPTION = ("RUN against BASELINE (a named baseline, a bundle file, or a run): each fit/"
               "evaluate/predict's steady step, CPU time and RSS peak. Exit 0 within the limits "
               "(or within the run-to-run noise), 1 beyond them, with what changed in the job, or "
               "when the run did not complete (killed, stopped, exited non-zero), 2 for bad input "
               "(a baseline that did not complete among it).")
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge check``."""
    p.add_argument("run", metavar="RUN")
    p.add_argument("--against", required=True, metavar="BASELINE")
    p.add_argument("--max-slower", metavar="SHARE", help="a step or the CPU time this much longer fails (10%%)")
    p.add_argument("--max-memory-growth", metavar="SHARE", help="an RSS peak this much larger fails (10%%)")
    p.add_argument("--no-new-findings", action="store_true", help="also fail on a finding the baseline did not have")
    p.add_argument("--format", default="text", choices=("text", "markdown", "junit"),
                   help="text (default), markdown (a CI job summary) or junit (a CI test report)")
    p.add_argument("-o", "--output", metavar="PATH", help="write the output there instead of stdout")
    p.add_argument("--json", metavar="PATH", help="also write the tensorgauge.check/1 document")
    p.add_argument("--config", metavar="PATH", help="limits from a TOML file's [tool.tensorgauge.check] table "
                                                    "(default: ./pyproject.toml when there is one; flags win)")


def main(args: argparse.Namespace) -> int:
    return check(args.store, args.run, args.against, args.max_slower, args.max_memory_growth,
                 args.no_new_findings, args.format, args.output, args.json, args.config)
