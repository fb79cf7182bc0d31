"""Every ``emit(Kind.X, key=...)`` in the package sends only the keys its payload's TypedDict declares
(:data:`tensorgauge.hook.protocol.PAYLOADS`): a misspelt field fails here, not in a reader."""

import ast
from pathlib import Path

import tensorgauge
from tensorgauge.hook.protocol import PAYLOADS, Kind

ROOT = Path(tensorgauge.__file__).parent
ENVELOPE = {"t"}  # set by the channel on every event; a payload may give its own (a phase begun earlier)


def emit_calls():
    """(where, kind, keyword names) of each ``….emit(Kind.NAME, ...)`` call."""
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "emit"
                    and node.args):
                continue
            first = node.args[0]
            kind = (getattr(Kind, first.attr) if isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name)
                    and first.value.id == "Kind" else None)
            yield f"{path.relative_to(ROOT)}:{node.lineno}", kind, [k.arg for k in node.keywords if k.arg]


def test_every_emit_sends_only_its_payloads_declared_keys():
    calls = list(emit_calls())
    assert len(calls) >= 40  # the hook's events, found
    unknown_kind = [(where, kind) for where, kind, _ in calls if kind is not None and kind not in PAYLOADS]
    assert unknown_kind == []
    wrong = [(where, kind, sorted(set(keys) - declared))
             for where, kind, keys in calls if kind is not None
             and set(keys) - (declared := set(PAYLOADS[kind].__annotations__) | ENVELOPE)]
    assert wrong == []


def test_a_misspelt_key_is_caught():
    tree = ast.parse("channel().emit(Kind.PHASE_END, phase_idd=3)")
    call = tree.body[0].value
    keys = {k.arg for k in call.keywords}
    assert keys - set(PAYLOADS[Kind.PHASE_END].__annotations__) == {"phase_idd"}
