"""Strings from a job, a bundle or the command line reach the terminal as text: no escape
sequence (OSC 52 writes the clipboard, OSC 0 the title, ESC[2J clears the screen), no markup."""

import json
import sys

from tensorgauge.cli import main
from tensorgauge.render.text import plain, safe

HOSTILE = "\x1b]52;c;aGk=\x07\x1b]0;pwned\x07\x1b[2J[bold red]x[/] \x9b31m"


def test_plain_shows_every_control_character():
    assert plain(HOSTILE) == "\\x1b]52;c;aGk=\\x07\\x1b]0;pwned\\x07\\x1b[2J[bold red]x[/] \\x9b31m"
    assert safe("[bold]a[/]") == "\\[bold]a\\[/]" and plain("tab\tand\nnewline") == "tab\tand\nnewline"


def test_a_hostile_name_phase_and_argument_print_as_text(store_path, capsys):
    """A name with control characters is refused (one line each); its markup, a phase's and an argument's
    control characters and markup are shown as text."""
    job = ("import tensorgauge, sys\n"
           f"with tensorgauge.phase({HOSTILE!r}):\n    pass\n")
    assert main(["run", "--name", HOSTILE, "--", sys.executable, "-c", job]) == 2
    assert main(["run", "--name", "[bold red]x[/]", "--", sys.executable, "-c", job, HOSTILE]) == 0
    capsys.readouterr()
    for command in (["show", "last"], ["runs"], ["show", HOSTILE + "nope"]):
        main(command)
        out, err = capsys.readouterr()
        assert "\x1b" not in out + err and "\x07" not in out + err and "\x9b" not in out + err
    main(["show", "last"])
    out = capsys.readouterr().out
    assert "\\x1b]0;pwned" in out and "[bold red]x[/]" in out  # shown, as text


def test_an_imported_bundle_with_markup_in_its_fields_lists_and_shows(tmp_path, capsys):
    doc = {"schema": "tensorgauge.bundle/1",
           "run": {"run_id": "r1", "command": ["[/]", HOSTILE], "started_at": "[/]2026-11-26T08:00[bold]",
                   "name": "[/]", "wall_seconds": 1.0, "complete": True, "exit_code": 0,
                   "env": {"host": {"hostname": HOSTILE, "cpu_model": "[/]"}}},
           "samples": [], "events": []}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    store = str(tmp_path / "s.db")
    assert main(["import", "--store", store, str(path)]) == 0
    for command in (["runs"], ["show", "r1"], ["compare", "r1", "r1"]):
        assert main([*command, "--store", store]) == 0, command
        out, err = capsys.readouterr()
        assert "\x1b" not in out + err and "Traceback" not in err


def test_a_name_argument_and_environment_value_that_are_not_utf8_show_and_report(store_path, tmp_path):
    """Bytes that are not UTF-8 (a Latin-1 file name, say) reach Python as lone surrogates: shown as
    \\xNN everywhere, and the HTML report is written whole (it died half-way, leaving 0 bytes)."""
    import os
    import subprocess

    env = {**os.environ, "TENSORGAUGE_STORE": str(store_path), "ODD": "caf\udce9"}
    tg = [sys.executable, "-m", "tensorgauge"]
    run = subprocess.run([os.fsencode(a) for a in [*tg, "run", "-q", "--name", "caf\udce9", "--", "true",
                                                    "na\udcefve"]], env={k: os.fsencode(v) for k, v in env.items()})
    assert run.returncode == 0
    shown = subprocess.run([*tg, "show", "last"], capture_output=True, env=env)
    assert shown.returncode == 0 and b"caf\\xe9" in shown.stdout and b"na\\xefve" in shown.stdout
    assert b"\xe9" not in shown.stdout  # not the raw byte
    page = tmp_path / "r.html"
    report = subprocess.run([*tg, "report", "last", "-o", str(page)], capture_output=True, env=env)
    assert report.returncode == 0 and b"Traceback" not in report.stderr
    assert "caf\\xe9" in page.read_text(encoding="utf-8")
