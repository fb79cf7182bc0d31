"""Bundles: export -> import round trip; bad, truncated, future and hostile files get one
clear line; property-based: random and mutated bundles never raise anything else."""

import io
import json
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from tensorgauge.cli import main
from tensorgauge.errors import TensorgaugeError
from tensorgauge.store import Store
from tensorgauge.store.bundle import SCHEMA, BundleError, loads, read

JOB = ("import tensorgauge, time\n"
       "with tensorgauge.phase('work'):\n"
       "    t = time.time()\n"
       "    while time.time() - t < 0.3: pass\n")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundle")
    store = folder / "runs.db"
    assert main(["run", "-q", "--store", str(store), "--name", "work", "--", sys.executable, "-c", JOB]) == 0
    out = folder / "work.json"
    assert main(["export", "--store", str(store), "work", "-o", str(out)]) == 0
    return store, out


def test_export_import_round_trip(exported, tmp_path, capsys):
    store, out = exported
    doc = json.loads(out.read_text())
    assert doc["schema"] == SCHEMA and doc["run"]["name"] == "work" and doc["sample_chunks"] and doc["events"]
    other = tmp_path / "other.db"
    assert main(["import", "--store", str(other), str(out)]) == 0
    original, imported = Store.open(store), Store.open(other)
    run_id = doc["run"]["run_id"]
    assert imported.run(run_id).to_dict() == original.run(run_id).to_dict()
    assert imported.samples(run_id) == original.samples(run_id)
    assert [e.to_dict() for e in imported.events(run_id)] == [e.to_dict() for e in original.events(run_id)]
    capsys.readouterr()
    assert main(["import", "--store", str(other), str(out)]) == 2  # already there: refused, nothing changed
    assert "already in store" in capsys.readouterr().err
    assert len(imported.samples(run_id)) == len(original.samples(run_id))
    assert main(["show", "--store", str(other), run_id]) == 0 and "work" in capsys.readouterr().out
    assert imported.analysis(run_id) is not None  # analysed at import: the first show reads it


def test_a_chunk_whose_frame_inflates_past_its_header_is_refused_without_inflating(exported, tmp_path, capsys):
    """A 3 GiB frame in a 131 KB bundle was inflated whole (3.1 GB RSS): a chunk is decompressed to
    the size its header declares at most."""
    import base64
    import resource
    import struct

    import zstandard

    _, out = exported
    doc = json.loads(out.read_text())
    blob = base64.b64decode(doc["sample_chunks"][0])
    (length,) = struct.unpack("<I", blob[4:8])
    writer = zstandard.ZstdCompressor().compressobj()
    zeros = bytes(1 << 20)
    frame = b"".join(writer.compress(zeros) for _ in range(512)) + writer.flush()  # 512 MiB of zeros
    doc["sample_chunks"][0] = base64.b64encode(blob[:8 + length] + frame).decode()
    path = tmp_path / "inflating.json"
    path.write_text(json.dumps(doc))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert main(["import", "--store", str(tmp_path / "s.db"), str(path)]) == 2
    assert "sample_chunks[0] is not a sample chunk" in capsys.readouterr().err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 << 10  # KiB: not 512 MiB


def test_event_times_outside_the_run_are_refused(exported, tmp_path, capsys):
    """bundle/1 steps ending at 5e8 s would have made a digest of 5e8 seconds (7.8 GB, then an error)."""
    store, _ = exported
    original = Store.open(store)
    record = original.run("work")
    steps = {"t": 0.2, "pid": 1, "kind": "steps", "data": {"phase": 1, "seconds": [0.1, 0.1], "ends": [0, 5e8]}}
    doc = {"schema": "tensorgauge.bundle/1", "run": record.to_dict(),
           "samples": [s.to_dict() for s in original.samples(record.run_id)], "events": [steps]}
    path = tmp_path / "far.json"
    path.write_text(json.dumps(doc))
    assert main(["import", "--store", str(tmp_path / "s.db"), str(path)]) == 2
    assert "events[0].ends lie outside the run" in capsys.readouterr().err


def test_a_bundle_of_the_first_form_still_imports_its_steps_digested(exported, tmp_path, capsys):
    """tensorgauge.bundle/1: every sample an object, every step's time in raw ``steps`` events."""
    store, _ = exported
    original = Store.open(store)
    record = original.run("work")
    work = next(e for e in original.events(record.run_id) if e.kind == "phase_begin")
    seconds = [0.001 * (1 + i % 10) for i in range(5000)]
    steps = [{"t": 0.2, "pid": work.pid, "kind": "steps",
              "data": {"phase": work.data["id"], "seconds": seconds[i:i + 100],
                       "ends": [0.1 + 0.0001 * j for j in range(i, i + 100)]}} for i in range(0, 5000, 100)]
    doc = {"schema": "tensorgauge.bundle/1", "run": record.to_dict(),
           "samples": [s.to_dict() for s in original.samples(record.run_id)],
           "events": [e.to_dict() for e in original.events(record.run_id)] + steps}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    other = tmp_path / "other.db"
    assert main(["import", "--store", str(other), str(path)]) == 0
    imported = Store.open(other)
    assert imported.samples(record.run_id) == original.samples(record.run_id)
    kinds = [e.kind for e in imported.events(record.run_id)]
    assert "steps" not in kinds and kinds.count("step_digest") == 1
    capsys.readouterr()
    assert main(["show", "--store", str(other), record.run_id, "--json"]) == 0
    (phase,) = json.loads(capsys.readouterr().out)["phases"]
    assert phase["steps"] == 5000 and phase["step_seconds_max"] == 0.01
    assert abs(phase["step_seconds_p50"] - 0.005) <= 0.01 * 0.005


def test_compare_a_bundle_with_a_stored_run(exported, capsys):
    store, out = exported
    assert main(["compare", "--store", str(store), str(out), "work", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["environment"] == [] and [r["name"] for r in doc["results"]] == ["work"]
    assert doc["results"][0]["slowdown"] == 1.0


@pytest.mark.parametrize("text, message", [
    ("", "not a bundle, or it is truncated"),
    ('{"schema": "tensorgauge.bundle/1", "run": {"run_id"', "truncated"),
    ('{"schema": "tensorgauge.bundle/9"}', "schema 'tensorgauge.bundle/9' is not supported"),
    ('{"schema": "something/1"}', "not a tensorgauge bundle"),
    ('[1, 2]', "not a tensorgauge bundle"),
    ('{"schema": "tensorgauge.bundle/1", "run": {"run_id": "../../etc", "command": [], "started_at": "x"},'
     ' "samples": [], "events": []}', "not a run id"),
    ('{"schema": "tensorgauge.bundle/1", "run": {"run_id": "r", "command": [], "started_at": "x"},'
     ' "samples": [{"t": NaN}], "events": []}', "not a number JSON allows"),
    ("[" * 100_000, "nested too deeply"),
])
def test_bad_bundles_get_one_clear_line(tmp_path, capsys, text, message):
    path = tmp_path / "b.json"
    path.write_text(text)
    store = tmp_path / "runs.db"
    assert main(["import", "--store", str(store), str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not store.exists() or Store.open(store).runs() == []


@pytest.mark.parametrize("path, value, message", [
    (("env", "host", "env_vars"), True, "run.env.host.env_vars is not an object of texts"),
    (("env", "job"), [], "run.env.job is not an object"),
    (("budget",), {"max_memory_bytes": "4GiB"}, "run.budget.max_memory_bytes is not an integer"),
])
def test_env_and_budget_fields_have_their_types(exported, path, value, message):
    _, out = exported
    doc = json.loads(out.read_text())
    parent = doc["run"]
    for key in path[:-1]:
        parent = parent.setdefault(key, {})
    parent[path[-1]] = value
    with pytest.raises(BundleError, match=message):
        loads(json.dumps(doc))


def test_a_binary_file_is_not_a_bundle(tmp_path):
    path = tmp_path / "b.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(BundleError, match="not UTF-8"):
        read(path)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                max_size=4), max_leaves=20)


def _fails_cleanly(text: str, tmp_path, original: str | None = None) -> None:
    """``text`` is refused with a clear error, or it imports, and then show, compare (with itself and
    with ``original``) and report render it."""
    try:
        bundle = loads(text)
    except TensorgaugeError:
        return
    from tensorgauge.analyse.compare import Side, compare
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.store.bundle import import_bundle

    def analyse(b):
        return RunReport.build(b.record, b.samples, b.events)
    from tensorgauge.render.compare import render_compare
    from tensorgauge.render.html import comparison_page, run_page
    from tensorgauge.render.terminal import render_run

    report = analyse(bundle)
    a, b = Side("a", analyse(loads(original)) if original else report), Side("b", report)
    comparison = compare(a, b)
    comparison.to_dict()
    # A bundle that imports is one that show, compare and report can render.
    console = Console(file=io.StringIO(), width=160)
    render_run(console, report)
    render_compare(console, comparison)
    run_page(report, js="")
    comparison_page(a, b, comparison, js="")
    store = Store.open(tmp_path / "prop.db")
    try:
        import_bundle(store, bundle)
    except TensorgaugeError:
        pass
    finally:
        store.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=JSON)
def test_random_json_never_raises_anything_but_a_clear_error(doc, tmp_path):
    _fails_cleanly(json.dumps(doc), tmp_path)
    _fails_cleanly(json.dumps({"schema": SCHEMA, "run": doc, "samples": doc, "events": doc}), tmp_path)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            yield from _paths(v, (*prefix, i))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_bundles_never_raise_anything_but_a_clear_error(exported, tmp_path, data):
    _, out = exported
    doc = json.loads(out.read_text())
    doc["events"] = doc["events"][:12]
    paths = [p for p in _paths(doc) if p]
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if data.draw(st.booleans()):
                parent[path[-1]] = data.draw(JSON)
            elif isinstance(parent, dict):
                parent.pop(path[-1], None)
        except (KeyError, IndexError, TypeError):
            continue
    text = json.dumps(doc)
    cut = data.draw(st.integers(0, len(text)))
    _fails_cleanly(text if data.draw(st.booleans()) else text[:cut], tmp_path, out.read_text())
