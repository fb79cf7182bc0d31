"""Long runs stay cheap: samples compressed in chunks (lossless), step times as digests, the
analysis stored once, any window read at full resolution; older stores still read."""

import json
import math
import random
import sqlite3

import numpy as np
import pytest
from conftest import needs_report

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.cli import main
from tensorgauge.model import Event, GpuReading, RunRecord, Sample
from tensorgauge.series import SampleSeries
from tensorgauge.steps import FIRST_STEPS, StepDigest
from tensorgauge.store import Store, chunks
from tensorgauge.store.schema import CHUNK_SAMPLES


def samples(n, start=0, gpus=1, seed=1):
    rng = random.Random(seed)
    out, cpu, rss = [], 0.0, 10**9
    for i in range(start, start + n):
        cpu = round(cpu + rng.uniform(0.1, 0.2), 2)
        rss += rng.choice((0, 4096, -4096, 1 << 20))
        out.append(Sample(t=round(i * 0.1 + rng.uniform(0, 0.002), 6), cpu_seconds=cpu,
                          cores_busy=None if i == start else round(rng.uniform(0, 2), 4), rss_bytes=rss, threads=9,
                          processes=1 + (i % 97 == 0), read_bytes=i * 4096 if i % 10 == 0 else None,
                          cpu_percent=[round(rng.uniform(0, 100), 1), rng.uniform(0, 100)] if i % 13 else None,
                          gpus=[GpuReading(index=g, name=f"GPU {g}", util_percent=float(rng.randrange(100)),
                                           memory_used_bytes=rng.randrange(1 << 34), power_watts=rng.uniform(0, 700))
                                for g in range(gpus) if i % 31]))
    return out


def test_a_chunk_gives_back_every_sample_exactly_and_is_small():
    original = samples(CHUNK_SAMPLES, gpus=2)
    blob = chunks.encode(SampleSeries.from_samples(original))
    assert chunks.decode(blob).to_samples() == original  # same values, same None, same GPUs and names
    plain = samples(CHUNK_SAMPLES, gpus=0)
    assert len(chunks.encode(SampleSeries.from_samples(plain))) < 20 * CHUNK_SAMPLES  # JSON rows: ~250 B each
    with pytest.raises(ValueError):
        chunks.decode(b"not a chunk at all")


def test_rows_become_chunks_a_minute_at_a_time_and_the_rest_at_the_end(tmp_path):
    store = Store.open(tmp_path / "runs.db")
    record = RunRecord(run_id="r", command=["x"], started_at="2026")
    store.save_run(record)
    data = samples(2 * CHUNK_SAMPLES + 150)
    for i in range(0, len(data), 5):  # as the monitor commits: a few samples at a time
        store.add("r", data[i:i + 5], [])
    rows = store.conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    assert store.conn.execute("SELECT COUNT(*) FROM sample_chunks").fetchone()[0] == 2 and rows == 150
    assert store.samples("r") == data  # chunks and rows read together
    record.complete = True
    store.save_run(record)  # the run's end
    assert store.conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 0
    assert store.samples("r") == data
    assert store.peaks() == {"r": (max(s.rss_bytes for s in data), len(data))}
    window = store.samples("r", 30.0, 42.0)
    assert window == [s for s in data if 30.0 <= s.t <= 42.0] and len(window) >= 119


def test_the_analysis_is_computed_once_and_read_back_for_a_finished_run(tmp_path, monkeypatch):
    store = Store.open(tmp_path / "runs.db")
    record = RunRecord(run_id="r", command=["x"], started_at="2026", wall_seconds=30.0, complete=True)
    events = [Event(0.5, 1, "phase_begin", {"id": 1, "name": "fit", "phase_kind": "fit", "cpu": 0.0}),
              Event(29.0, 1, "phase_end", {"id": 1, "cpu": 20.0})]
    store.import_run(record, samples(300), events)
    first = RunReport.load(store, "r")
    assert store.analysis("r") is not None
    monkeypatch.setattr(Store, "series", lambda *a, **k: pytest.fail("a stored analysis reads no samples"))
    again = RunReport.load(store, "r")
    assert again.to_dict() == first.to_dict() and again.timeline == json.loads(json.dumps(first.timeline))
    record.name = "renamed"  # another record: analysed again
    store.save_run(record)
    monkeypatch.undo()
    assert RunReport.load(store, "r").record.name == "renamed"


def test_phase_figures_from_chunks_and_digests_equal_the_full_resolution_ones(tmp_path):
    """Exact for CPU-s, RSS and cores peaks, step counts and maxima; quantiles within 1%."""
    rng = random.Random(3)
    data = samples(3000, gpus=0)
    events = [Event(0.0, 1, "phase_begin", {"id": 1, "name": "fit", "phase_kind": "fit", "cpu": 0.0})]
    steps_of = {}
    for epoch in range(5):
        start, end = 1.0 + 60 * epoch, 60.0 * (epoch + 1)
        events.append(Event(start, 1, "phase_begin", {"id": 2 + epoch, "name": f"epoch {epoch + 1}",
                                                       "phase_kind": "epoch", "parent": 1, "cpu": start}))
        seconds = [rng.lognormvariate(-4, 0.4) for _ in range(3000)]
        steps_of[2 + epoch] = seconds
        for i in range(0, 3000, 50):
            events.append(Event(start + i * 0.01, 1, "steps", {"phase": 2 + epoch, "seconds": seconds[i:i + 50],
                                                               "ends": [start + (i + k) * 0.01 for k in range(50)]}))
        events.append(Event(end, 1, "phase_end", {"id": 2 + epoch, "cpu": end * 0.9}))
    events.append(Event(300.0, 1, "phase_end", {"id": 1, "cpu": 270.0}))
    store = Store.open(tmp_path / "runs.db")
    record = RunRecord(run_id="r", command=["x"], started_at="2026", wall_seconds=300.0, complete=True)
    from tensorgauge.steps import digest_steps

    store.import_run(record, data, digest_steps(events))
    report = RunReport.load(store, "r")
    assert "steps" not in {e.kind for e in store.events("r")}
    for phase in report.phases:
        inside = [s for s in data if phase.start < s.t <= phase.end]
        assert phase.rss_peak_bytes == max(s.rss_bytes for s in inside)
        assert phase.cores_busy_peak == round(max(s.cores_busy for s in inside if s.cores_busy is not None), 3)
        values = sorted(sum(steps_of.values(), [])) if phase.kind == "fit" else sorted(
            steps_of[int(phase.name.split()[1]) + 1])
        assert phase.steps == len(values) and phase.step_seconds_max == round(values[-1], 6)
        for q, got in ((50, phase.step_seconds_p50), (95, phase.step_seconds_p95)):
            exact = values[max(0, math.ceil(q / 100 * len(values)) - 1)]
            assert abs(got - exact) <= 0.01 * exact, (phase.name, q)
    fit = next(p for p in report.phases if p.kind == "fit")
    assert fit.cpu_seconds == 270.0  # from the hook's own figures, exactly


def test_step_digests_merge_and_keep_the_first_and_slowest_steps_exactly():
    a, b = StepDigest(1), StepDigest(1)
    a.add([0.1] * FIRST_STEPS + [5.0], [float(i) for i in range(FIRST_STEPS + 1)])
    b.add([0.2, 7.0], [200.0, 201.5])
    merged = StepDigest.from_payload(json.loads(json.dumps(a.to_payload()))).merge(
        StepDigest.from_payload(b.to_payload()))
    assert merged.count == FIRST_STEPS + 3 and merged.seconds_max == 7.0
    assert [s for s, _ in merged.slowest_steps()[:2]] == [7.0, 5.0] and merged.slowest_steps()[0][1] == 201.5
    assert merged.first[:FIRST_STEPS] == [(float(i), 0.1) for i in range(FIRST_STEPS)]
    assert merged.rate[200] == 1 and merged.rate[201] == 1
    with pytest.raises(ValueError):
        StepDigest.from_payload({"count": 3, "sketch": "not base64 of a sketch!"})


def test_a_digest_keeps_only_the_bins_between_its_least_and_greatest_step():
    """A sketch's store grows 128 bins at a time: a one-step epoch's digest was 1.7 KB, most of it empty bins,
    stored, read and merged for each of a run's 25,000 epochs."""
    one = StepDigest(1)
    one.add([0.02], [1.0])
    payload = json.dumps(one.to_payload())
    assert len(payload) < 500
    two = StepDigest(2)
    two.add([0.5, 0.7], [2.0, 3.0])
    merged = StepDigest.from_payload(json.loads(payload)).merge(StepDigest.from_payload(two.to_payload()))
    assert merged.count == 3 and abs(merged.quantile(0.5) - 0.5) <= 0.01 * 0.5
    assert abs(merged.quantile(0.0) - 0.02) <= 0.01 * 0.02


def test_show_from_to_prints_every_sample_of_the_window(tmp_path, capsys):
    store_path = tmp_path / "runs.db"
    store = Store.open(store_path)
    data = samples(3000, gpus=0)
    store.import_run(RunRecord(run_id="r", command=["x"], started_at="2026", wall_seconds=300.0, complete=True),
                     data, [])
    assert main(["show", "--store", str(store_path), "r", "--from", "1m", "--to", "1m30s", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["samples"]
    assert [s["t"] for s in shown] == [s.t for s in data if 60.0 <= s.t <= 90.0] and len(shown) >= 299
    assert main(["show", "--store", str(store_path), "r", "--from", "1m", "--to", "1m30s"]) == 0
    text = capsys.readouterr().out
    assert f"{len(shown)} samples" in text and f"{shown[0]['t']:.3f}" in text
    assert main(["show", "--store", str(store_path), "r", "--from", "2m", "--to", "1m"]) == 2
    assert "must come after" in capsys.readouterr().err
    assert main(["show", "--store", str(store_path), "r", "--from", "yesterday"]) == 2
    assert "not a time from the run's start" in capsys.readouterr().err


@needs_report
def test_report_from_to_draws_every_sample_of_the_window(tmp_path, capsys):
    store_path = tmp_path / "runs.db"
    Store.open(store_path).import_run(RunRecord(run_id="r", command=["x"], started_at="2026", wall_seconds=300.0,
                                                complete=True), samples(3000, gpus=0), [])
    assert main(["report", "--store", str(store_path), "r", "--from", "1m", "--to", "1m30s", "-o",
                 str(tmp_path / "w.html")]) == 0
    page = (tmp_path / "w.html").read_text()
    assert '"domain": [60' in page or '"domain":[60' in page
    assert "every sample; drag a chart" in page  # 30 s in 1,500 bins: one sample a bin at most
    assert main(["report", "--store", str(store_path), "r", "-o", str(tmp_path / "all.html")]) == 0
    assert "bins of 200.0 ms, each with its peak and minimum" in (tmp_path / "all.html").read_text()


def test_a_damaged_chunk_is_one_clear_line_and_other_runs_still_read(tmp_path, capsys):
    store_path = tmp_path / "runs.db"
    store = Store.open(store_path)
    for run_id in ("good", "bad"):
        store.import_run(RunRecord(run_id=run_id, command=["x"], started_at="2026", complete=True),
                         samples(700, gpus=0), [])
    store.conn.execute("UPDATE sample_chunks SET data = ? WHERE run_id = 'bad'", (b"TGC1\x05\x00\x00\x00{}xyz",))
    assert main(["show", "--store", str(store_path), "bad"]) == 2
    err = capsys.readouterr().err
    assert "damaged sample chunk" in err and err.count("\n") == 1 and "Traceback" not in err
    assert main(["show", "--store", str(store_path), "good"]) == 0
    capsys.readouterr()
    out = tmp_path / "bad.json"
    for damaged in (b"TGC1\x05\x00\x00\x00{}xyz", "a TEXT value"):  # both refused: no bundle import would take
        store.conn.execute("UPDATE sample_chunks SET data = ? WHERE run_id = 'bad'", (damaged,))
        store.conn.commit()
        assert main(["export", "--store", str(store_path), "bad", "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert "damaged sample chunk" in err and "Traceback" not in err and not out.exists()


def test_export_to_a_dash_writes_the_bundle_to_stdout(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a file named '-' was written
    store_path = tmp_path / "runs.db"
    Store.open(store_path).import_run(RunRecord(run_id="r", command=["x"], started_at="2026", complete=True),
                                      samples(30, gpus=0), [])
    assert main(["export", "--store", str(store_path), "r", "-o", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["run_id"] == "r" and not (tmp_path / "-").exists()


def test_a_store_of_the_previous_version_gains_chunks_and_its_runs_still_read(tmp_path):
    """Schema 2 (0.1.0's): sample rows only. Opening adds the new tables; a run's rows are chunked the
    first time it is analysed, and read the same before and after."""
    path = tmp_path / "old.db"
    store = Store.open(path)
    data = samples(1300, gpus=1)
    store.save_run(RunRecord(run_id="r", command=["x"], started_at="2026"))
    store.conn.executescript("DROP TABLE sample_chunks; DROP TABLE analyses; PRAGMA user_version = 2;")
    store.backend.chunked = False  # rows only, as 0.1.0 wrote them
    store.add("r", data, [])
    store.close()
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 1300
    reopened = Store.open(path)
    assert reopened.conn.execute("PRAGMA user_version").fetchone()[0] == 3
    assert reopened.samples("r") == data
    record = reopened.run("r")
    record.complete = True
    reopened.save_run(record)
    assert reopened.conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 0
    assert reopened.samples("r") == data
    series = reopened.series("r")
    assert np.array_equal(series["rss_bytes"], [s.rss_bytes for s in data])


def test_a_digest_read_back_gives_what_ddsketchs_own_decoder_gives():
    """steps.py reads a sketch's bins whole (ddsketch adds them one at a time): the same sketch."""
    import base64
    import random

    from ddsketch.pb.ddsketch_pb2 import DDSketch as DDSketchMessage
    from ddsketch.pb.proto import DDSketchProto

    rng = random.Random(3)
    for trial in range(20):
        d = StepDigest(1)
        n = rng.randrange(1, 2000)
        d.add([rng.lognormvariate(-5 + trial / 4, 0.2 + trial / 10) for _ in range(n)], [float(i) for i in range(n)])
        message = DDSketchMessage()
        message.ParseFromString(base64.b64decode(d.to_payload()["sketch"]))
        theirs, ours = DDSketchProto.from_proto(message), StepDigest.from_payload(d.to_payload()).sketch
        assert ours.count == theirs.count == n
        for q in (0.0, 0.01, 0.5, 0.95, 0.99, 1.0):
            assert ours.get_quantile_value(q) == theirs.get_quantile_value(q)
        theirs.merge(DDSketchProto.from_proto(message))
        ours.merge(StepDigest.from_payload(d.to_payload()).sketch)
        assert ours.get_quantile_value(0.5) == theirs.get_quantile_value(0.5) and ours.count == 2 * n
