"""The command line, the commands and the runner stay readable: no function over 60 lines (ast)."""

import ast
from pathlib import Path

import tensorgauge

ROOT = Path(tensorgauge.__file__).parent
LIMIT = 60
WATCHED = [ROOT / "cli.py", *sorted((ROOT / "commands").glob("*.py")), ROOT / "monitoring" / "runner.py"]


def long_functions(path: Path) -> list[tuple[str, str, int]]:
    tree = ast.parse(path.read_text())
    return [(path.name, node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > LIMIT]


def test_no_function_over_60_lines_in_the_cli_the_commands_and_the_runner():
    assert [f for path in WATCHED for f in long_functions(path)] == []


def test_every_command_declares_its_flags_and_its_entry():
    from tensorgauge.cli import COMMANDS

    files = {p.stem for p in (ROOT / "commands").glob("*.py") if not p.stem.startswith("_")}
    assert {c.__name__.rpartition(".")[2] for c in COMMANDS} == files
    for command in COMMANDS:
        assert callable(command.add_arguments) and callable(command.main) and command.VERB
