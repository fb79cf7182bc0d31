import os
import subprocess
import sys

from tensorgauge.hook.channel import Channel, EventReader


def test_events_round_trip_with_cpu_and_rss(tmp_path):
    path = str(tmp_path / "events.jsonl")
    open(path, "w").close()  # the monitor makes the file; the hook only appends to it
    channel = Channel(path)
    channel.emit("phase_begin", id=1, name="fit")
    events = EventReader(path).read_new()
    assert len(events) == 1
    event = events[0]
    assert event["kind"] == "phase_begin" and event["pid"] == os.getpid() and event["name"] == "fit"
    assert event["cpu"] > 0 and event["rss"] > 1 << 20


def test_reader_returns_complete_lines_only_and_skips_torn_ones(tmp_path):
    path = tmp_path / "events.jsonl"
    reader = EventReader(str(path))
    assert reader.read_new() == []  # no file yet
    path.write_bytes(b'{"t": 1, "kind": "a"}\n{"t": 2, "ki')
    assert [e["kind"] for e in reader.read_new()] == ["a"]
    with open(path, "ab") as f:
        f.write(b'nd": "b"}\n{garbage}\n[1]\n{"t": 3, "kind": "c"}\n')
    assert [e["kind"] for e in reader.read_new()] == ["b", "c"]


def test_no_path_or_unwritable_path_is_silent(tmp_path):
    Channel(None).emit("x")
    broken = Channel(str(tmp_path / "missing-dir" / "events.jsonl"))
    broken.emit("x")
    assert broken.broken and not broken.active


def test_many_processes_append_without_interleaving(tmp_path):
    path = str(tmp_path / "events.jsonl")
    open(path, "w").close()
    code = ("import sys; from tensorgauge.hook.channel import Channel; c = Channel(sys.argv[1]);\n"
            "[c.emit('steps', seconds=[0.001] * 200, ends=[1.0] * 200) for _ in range(200)]")
    procs = [subprocess.Popen([sys.executable, "-c", code, path]) for _ in range(4)]
    assert all(p.wait() == 0 for p in procs)
    events = EventReader(path).read_new(everything=True)
    assert len(events) == 800
    assert all(len(e["seconds"]) == 200 for e in events)


def test_a_burst_is_read_over_several_calls_and_the_last_read_takes_the_rest(tmp_path):
    path = tmp_path / "events.jsonl"
    line = b'{"t": 1, "kind": "trace", "function": "f"}\n'
    path.write_bytes(line * 100_000)  # 4.4 MB written at once by the job
    reader = EventReader(str(path), max_bytes=1 << 20)
    first = reader.read_new()
    assert 0 < len(first) < 30_000  # one tick reads a bounded part
    rest = reader.read_new(everything=True)
    assert len(first) + len(rest) == 100_000 and reader.read_new() == []


def test_events_that_meet_a_full_filesystem_are_counted_and_told_once_space_is_back(tmp_path, monkeypatch):
    """Every write answered with ENOSPC, as a full /dev/shm does: the channel keeps trying (it used to
    give up for good), and the next event that gets through carries the count."""
    import errno

    from tensorgauge.hook import channel as channel_module

    path = tmp_path / "events.jsonl"
    path.write_text("")
    channel = Channel(str(path))

    def full(fd, line):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(channel_module, "write_whole", full)
    for i in range(3):
        channel.emit("phase_begin", id=i, name="lost")
    assert channel.lost == 3 and channel.active
    monkeypatch.undo()  # space is back
    channel.emit("phase_begin", id=9, name="through")
    (event,) = EventReader(str(path)).read_new()
    assert event["name"] == "through" and event["lost_before"] == 3 and channel.lost == 0


def test_the_recorder_counts_events_the_job_could_not_write_and_a_full_filesystem_is_said(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from tensorgauge.model import RunRecord
    from tensorgauge.monitoring.recorder import Recorder
    from tensorgauge.monitoring.run_files import SpaceWatch
    from tensorgauge.store import Store
    from tensorgauge.testing import FakeClock

    store = Store.open(tmp_path / "runs.db")
    record = RunRecord(run_id="r", command=["job"], started_at="2026-11-26T08:00:00+00:00")
    store.save_run(record)
    clock = FakeClock(100.0)
    recorder = Recorder(store, record, 100.0, clock)
    recorder.add([], [{"t": 100.1, "pid": 1, "kind": "phase_begin", "id": 2, "name": "p", "phase_kind": "fit",
                       "lost_before": 1998}], force=True)
    assert recorder.events_dropped == 1998
    assert "lost_before" not in store.events("r")[0].data
    said: list = []
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_bavail=0, f_frsize=4096))
    watch = SpaceWatch(str(tmp_path), said.append)
    watch.observe(None, [])
    watch.observe(None, [])
    assert len(said) == 1 and "is full" in said[0]
