"""The findings registry: rules run after the rules whose findings they read, whatever their order
in the files; an id no rule returns, or a cycle, is refused."""

import pytest

from tensorgauge.analyse import findings, rules
from tensorgauge.analyse.rules import REGISTRY, Entry, ordered
from tensorgauge.model import Finding, RunRecord


def entry(name: str, ids: tuple[str, ...], after: tuple[str, ...] = ()) -> Entry:
    def function(facts):
        return None

    function.__name__ = name
    return Entry(ids, "performance", function, after)


def test_a_rule_runs_after_those_it_reads_else_in_registration_order():
    first, reader, second = entry("a", ("a",)), entry("idle", ("idle",), after=("c",)), entry("c", ("c",))
    assert [e.function.__name__ for e in ordered([first, reader, second])] == ["a", "c", "idle"]


def test_an_unknown_id_or_a_cycle_is_refused():
    with pytest.raises(ValueError, match="which no rule returns"):
        ordered([entry("x", ("x",), after=("nope",))])
    with pytest.raises(ValueError, match="cycle"):
        ordered([entry("x", ("x",), after=("y",)), entry("y", ("y",), after=("x",))])


def test_the_registered_rules_keep_their_declared_order():
    order = [i for e in ordered() for i in e.ids]
    for e in REGISTRY:
        for read in e.after:
            assert order.index(read) < order.index(e.ids[0]), (e.ids, read)
    assert order.index("stalls") < order.index("cores_idle")  # declared, though registered after it


def test_a_rule_sees_only_the_findings_it_declared(monkeypatch):
    """What a rule reads is what it declares: one that reads an undeclared finding sees none, so its
    result never hangs on the order the rules happen to be in."""
    seen: dict[str, list[str]] = {}

    def finding(id_: str):
        def function(facts):
            seen[id_] = [x.id for x in facts.found]
            return Finding(id=id_, severity="low", title=id_, evidence={}, fix="")

        function.__name__ = id_
        return Entry((id_,), "performance", function, ("a",) if id_ == "declared" else ())

    monkeypatch.setattr(rules, "REGISTRY", [finding("a"), finding("b"), finding("undeclared"), finding("declared")])
    record = RunRecord(run_id="r", command=["x"], started_at="2026", wall_seconds=1.0, env={})
    found = findings.find(record, [], [], [])
    assert sorted(f.id for f in found) == ["a", "b", "declared", "undeclared"]
    assert seen == {"a": [], "b": [], "undeclared": [], "declared": ["a"]}


def test_the_analysis_version_is_what_the_registered_rules_declare():
    from tensorgauge.analyse import findings  # noqa: F401  (every rule registered)
    from tensorgauge.analyse.analysis_version import analysis_version, declarations_in_source, version_of
    from tensorgauge.analyse.rules import REGISTRY

    assert sorted(declarations_in_source()) == sorted(e.declaration() for e in REGISTRY)
    assert analysis_version() == version_of(e.declaration() for e in REGISTRY)
    bumped = [[*d[:2], d[2] + 1, *d[3:]] if i == 0 else d for i, d in enumerate(e.declaration() for e in REGISTRY)]
    assert version_of(bumped) != analysis_version()  # a rule's new version: a new analysis version
