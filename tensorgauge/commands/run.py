"""``tensorgauge run [options] -- COMMAND``: record a command, or time fixes on it (--try-fixes)."""

from __future__ import annotations

import json

from tensorgauge.commands._recording import RecordOptions, record
from tensorgauge.commands._shared import console, open_store, progress_printer, write_text


def run(command: list[str], options: RecordOptions, try_fixes: bool = False) -> int:
    if command and command[0] == "--":
        command = command[1:]
    if try_fixes:
        return _try_fixes(command, options)
    return record(command, options)[0]


def _try_fixes(command: list[str], options: RecordOptions) -> int:
    from tensorgauge.monitoring.runner import resolve_command
    from tensorgauge.monitoring.tryfixes import try_fixes
    from tensorgauge.render.terminal import render_trials

    resolve_command(command)
    store = open_store(options.store)
    trials = try_fixes(command, store, progress=progress_printer())
    render_trials(console(), trials)
    if options.json_path:
        write_text(json.dumps(trials.to_dict(), indent=2), options.json_path)
    return 0
