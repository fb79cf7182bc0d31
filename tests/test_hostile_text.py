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
    job = ("import tensorgauge, sys\n"
           f"with tensorgauge.phase({HOSTILE!r}):\n    pass\n")
    assert main(["run", "--name", HOSTILE, "--", sys.executable, "-c", job, HOSTILE]) == 0
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
