"""Every field of every record type, drawn from its declaration: a value of the wrong kind is
one clear error naming the field; values of the right kind load, store, and render."""

import io
import json
import uuid
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from tensorgauge.analyse.compare import Side, compare
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.checks import is_kind, payload_spec, record_spec
from tensorgauge.cli import main
from tensorgauge.hook.protocol import PAYLOADS
from tensorgauge.model import BUDGET_FIELDS, ENV_PARTS, Event, GpuReading, RunRecord, Sample
from tensorgauge.render.compare import render_compare
from tensorgauge.render.html import comparison_page, run_page
from tensorgauge.render.terminal import render_run
from tensorgauge.store import Store
from tensorgauge.store.bundle import BundleError, from_dict

SCHEMA = "tensorgauge.bundle/1"  # the form with every sample an object: each field checked by its kind

TEXT = st.text(max_size=12)
NUMBER = st.one_of(st.integers(-10**6, 10**6), st.floats(-1e6, 1e6, allow_nan=False))
INT = st.integers(-2**40, 2**40)
OBJECT = st.dictionaries(TEXT, st.one_of(st.none(), INT, TEXT), max_size=3)


def value_of(kind: str):
    """A strategy for values of a declared kind."""
    if kind.endswith("?"):
        return st.one_of(st.none(), value_of(kind[:-1]))
    if kind == "records":
        return st.lists(record(GpuReading), max_size=2, unique_by=lambda g: g["index"])
    return {"number": NUMBER, "int": INT, "bool": st.booleans(), "text": TEXT,
            "texts": st.lists(TEXT, max_size=3), "numbers": st.lists(NUMBER, max_size=4),
            "ints": st.lists(INT, max_size=3), "objects": st.lists(OBJECT, max_size=2), "object": OBJECT,
            "text_map": st.dictionaries(TEXT, TEXT, max_size=2), "list": st.lists(INT, max_size=2),
            "any": OBJECT}[kind]


def record(cls):
    return st.fixed_dictionaries({name: value_of(kind) for name, kind in record_spec(cls).items()})


ODD = [None, True, 1, -3, 2.5, 2**64, "x", [], ["x"], [1.5], [{}], {}, {"a": "b"}, {"a": 1}, [None]]


def wrong_value(kind: str):
    return st.sampled_from([v for v in ODD if not is_kind(kind, v)])


def base_doc():
    gpu = {"index": 0, "name": "GPU", "util_percent": 50.0, "memory_used_bytes": 1, "memory_total_bytes": 2,
           "power_watts": 1.0, "job_memory_bytes": 1}
    samples = [{"t": 0.1 * i, "cpu_seconds": 0.05 * i, "cores_busy": 0.5, "rss_bytes": 1000 + i, "threads": 2,
                "processes": 1, "cpu_percent": [50.0], "runnable": 1, "gpus": [gpu]} for i in range(5)]
    events = [{"t": 0.05, "pid": 1, "kind": "phase_begin", "data": {"id": 1, "name": "fit", "phase_kind": "fit"}},
              {"t": 0.3, "pid": 1, "kind": "steps", "data": {"phase": 1, "seconds": [0.1, 0.1], "ends": [0.2, 0.3]}},
              {"t": 0.4, "pid": 1, "kind": "phase_end", "data": {"id": 1}}]
    run = {"run_id": "r1", "command": ["python"], "started_at": "2026-11-26T08:00:00+00:00", "wall_seconds": 0.5,
           "complete": True, "exit_code": 0, "env": {"host": {"cores_allowed": 2.0}, "job": {}, "worker": {}},
           "budget": {"max_memory_bytes": 10**9}}
    return {"schema": SCHEMA, "run": run, "samples": samples, "events": events}


# Every declared place: (where in the document, the field's declaration).
PLACES = ([(("run", name), kind) for name, kind in record_spec(RunRecord).items()]
          + [(("samples", 0, name), kind) for name, kind in record_spec(Sample).items()]
          + [(("samples", 0, "gpus", 0, name), kind) for name, kind in record_spec(GpuReading).items()]
          + [(("events", 0, name), kind) for name, kind in record_spec(Event).items()]
          + [(("run", "env", part, name), kind) for part, spec in ENV_PARTS.items() for name, kind in spec.items()]
          + [(("run", "budget", name), kind) for name, kind in BUDGET_FIELDS.items()])
EVENT_PLACES = [(kind_name, name, kind) for kind_name in PAYLOADS for name, kind in payload_spec(kind_name).items()]


def put(doc, path, value):
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


@pytest.mark.parametrize("path, kind", PLACES, ids=[".".join(map(str, p)) for p, _ in PLACES])
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_a_wrong_kind_in_any_record_field_is_one_clear_error(path, kind, data):
    doc = base_doc()
    bad = data.draw(wrong_value(kind))
    put(doc, path, bad)
    with pytest.raises(BundleError) as raised:
        from_dict(doc)
    assert str(path[-1]) in str(raised.value) or path[-1] in ("run_id",)


@pytest.mark.parametrize("event_kind, name, kind", EVENT_PLACES, ids=[f"{k}.{n}" for k, n, _ in EVENT_PLACES])
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_a_wrong_kind_in_any_event_payload_is_one_clear_error(event_kind, name, kind, data):
    doc = base_doc()
    doc["events"].append({"t": 0.2, "pid": 1, "kind": event_kind, "data": {name: data.draw(wrong_value(kind))}})
    with pytest.raises(BundleError, match=f"events\\[3\\].data.{name} is not"):
        from_dict(doc)


def _floats(cls, doc: dict) -> dict:
    spec = record_spec(cls)
    return {k: float(v) + 0.0 if spec[k].rstrip("?") == "number" and v is not None else v for k, v in doc.items()}


def normalised(sample) -> str:
    """A sample as sorted JSON, numbers as floats (stored as float64, 5 comes back as 5.0)."""
    doc = _floats(Sample, sample.to_dict())
    doc["cpu_percent"] = [float(x) for x in doc["cpu_percent"]] if doc["cpu_percent"] is not None else None
    doc["gpus"] = sorted((_floats(GpuReading, g) for g in doc["gpus"]), key=lambda g: g["index"])  # by index
    return json.dumps(doc, sort_keys=True)


def render_everything(report):
    console = Console(file=io.StringIO(), width=160)
    render_run(console, report)
    side = Side("a", report)
    comparison = compare(side, side)
    render_compare(console, comparison)
    json.dumps(report.to_dict(), default=str)
    run_page(report, js="")
    comparison_page(side, side, comparison, js="")


INSIDE = st.floats(0, 50, allow_nan=False)  # event times lie inside the run (a bundle's are checked for it)
STEP_TIMES = {"ends": st.lists(INSIDE, max_size=4), "seconds": st.lists(INSIDE, max_size=4)}
EVENTS = st.sampled_from(sorted(PAYLOADS)).flatmap(
    lambda k: st.fixed_dictionaries({"t": INSIDE, "pid": st.integers(0, 3), "kind": st.just(k),
                                     "data": st.fixed_dictionaries({}, optional={
                                         n: STEP_TIMES[n] if k == "steps" and n in STEP_TIMES else value_of(v)
                                         for n, v in payload_spec(k).items()})}))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(run=record(RunRecord), samples=st.lists(record(Sample), max_size=4), events=st.lists(EVENTS, max_size=8),
       env=st.fixed_dictionaries({part: st.fixed_dictionaries({}, optional={n: value_of(k) for n, k in spec.items()})
                                  for part, spec in ENV_PARTS.items()}),
       budget=st.one_of(st.none(), st.fixed_dictionaries({}, optional={n: value_of(k) for n, k in
                                                                       BUDGET_FIELDS.items()
                                                                       if n != "gpu_memory_limit"})))
def test_any_values_of_the_declared_kinds_load_store_and_render(run, samples, events, env, budget, tmp_path):
    run.update(run_id="r1", env=env, budget=budget)
    doc = {"schema": SCHEMA, "run": run, "samples": samples, "events": events}
    bundle = from_dict(json.loads(json.dumps(doc)))
    render_everything(RunReport.build(bundle.record, bundle.samples, bundle.events))
    store = Store.open(tmp_path / f"{uuid.uuid4().hex}.db")  # a fresh store for each example
    store.import_run(bundle.record, bundle.samples, bundle.events)
    assert sorted(map(normalised, store.samples("r1"))) == sorted(map(normalised, bundle.samples))
    assert store.run("r1").to_dict() == bundle.record.to_dict()
    store.close()


def test_the_reported_case_a_dict_job_id_is_one_line_and_exit_2(tmp_path, capsys):
    doc = base_doc()
    doc["run"]["job_id"] = {"x": 1}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    assert main(["import", "--store", str(tmp_path / "s.db"), str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run.job_id is not text" in err and "Traceback" not in err
    assert not (tmp_path / "s.db").exists() or Store.open(tmp_path / "s.db").runs() == []


def test_every_record_field_is_declared_with_a_kind_and_a_source():
    for cls in (GpuReading, Sample, Event, RunRecord):
        for f in fields(cls):
            assert f.metadata.get("kind") and f.metadata.get("source"), (cls.__name__, f.name)
