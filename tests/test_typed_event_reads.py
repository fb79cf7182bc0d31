"""Event data is read through its payload's TypedDict (``Event.read``, ``model.payloads``,
``RunFacts.payloads/last/first_ok``) everywhere outside the job's side (the hook, scenarios, bench):
a field is then named in one place, :mod:`tensorgauge.hook.protocol`, and mypy checks every read of it."""

import ast
from pathlib import Path

import tensorgauge

ROOT = Path(tensorgauge.__file__).parent
READERS = {"model.py"}  # Event.read and payloads: the only places that touch ``Event.data`` untyped
JOBS = {"hook", "scenarios", "bench"}  # code that runs in the job (writes events; ``tf.data`` is TensorFlow's)


def untyped_reads(path: Path) -> list[str]:
    """``x.data`` attribute reads in ``path`` (``self.data`` in a reader excepted)."""
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.ctx, ast.Load)]


def test_outside_the_hook_event_data_is_read_only_through_the_typed_readers():
    found = [hit for path in sorted(ROOT.rglob("*.py"))
             if path.relative_to(ROOT).parts[0] not in JOBS and str(path.relative_to(ROOT)) not in READERS
             for hit in untyped_reads(path)]
    assert found == []


def test_the_readers_type_what_they_return():
    from tensorgauge.hook.protocol import Kind, PhaseBegin
    from tensorgauge.model import Event, payloads

    events = [Event(0.0, 1, Kind.PHASE_BEGIN, {"id": 1, "name": "fit"}), Event(0.5, 1, Kind.EXIT, {})]
    assert payloads(events, PhaseBegin) == [{"id": 1, "name": "fit"}]
    assert events[0].read(PhaseBegin) is events[0].data  # a view for the type checker, no copy
