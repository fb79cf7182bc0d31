"""The hook's events channel under a hostile job and a full filesystem, on real processes: nothing
the job does to its channel blocks the monitor or its watchdog, the hook writes only into its own
events file and only whole lines, and no one bad line stops the recording."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tensorgauge.cli import main
from tensorgauge.store import Store

PY = sys.executable
SWAP_FOR_FIFO = ("import os, time\n"
                 "path = os.environ['TENSORGAUGE_EVENTS']\n"
                 "os.remove(path)\n"
                 "os.mkfifo(path)\n"
                 "time.sleep(1.0)\n")


def run_monitor(args: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``tensorgauge run`` in a process of its own: a monitor that blocks fails the test, not the suite."""
    return subprocess.run([PY, "-m", "tensorgauge", "run", "-q", *args], env=env, timeout=timeout,
                          capture_output=True, text=True)


def test_a_fifo_in_place_of_the_events_file_leaves_the_watchdog_working(store_path, tmp_path):
    """The job swaps its events file for a FIFO, then allocates 500 MiB under a 300 MiB budget without a
    cgroup: the monitor used to block in open() for ever, its watchdog with it."""
    job = SWAP_FOR_FIFO + "held = [bytearray(50 << 20) for _ in range(10)]\ntime.sleep(5)\n"
    env = {**os.environ, "TENSORGAUGE_NO_CGROUP": "1", "TENSORGAUGE_STORE": str(store_path)}
    done = run_monitor(["--max-memory", "300MiB", "--", PY, "-c", job], env, timeout=60)
    assert done.returncode == 128 + 9, done.stderr
    record = Store.open(store_path).run("last")
    assert record.budget["stopped"] and record.budget["peak_bytes"] < 400 << 20  # killed, not left to its sleep
    assert "events channel was tampered with" in record.recording_error
    assert done.stderr.count("tampered with") == 1  # said once


def test_a_monitor_whose_job_made_its_events_file_a_fifo_answers_sigterm(store_path):
    env = {**os.environ, "TENSORGAUGE_STORE": str(store_path)}
    monitor = subprocess.Popen([PY, "-m", "tensorgauge", "run", "-q", "--", PY, "-c", SWAP_FOR_FIFO + "time.sleep(60)\n"],
                               env=env, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2.5)  # the swap is made, the monitor has read the channel since
        monitor.send_signal(signal.SIGTERM)
        assert monitor.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        if monitor.poll() is None:
            monitor.kill()
            monitor.wait()
    record = Store.open(store_path).run("last")
    assert record.complete and record.signal == signal.SIGTERM


def test_the_hook_never_writes_into_a_file_the_job_opened_under_its_descriptors_number(store_path, tmp_path):
    """`os.closerange(3, 256)`, then the job opens its own file: it got the hook's JSON events."""
    mine = tmp_path / "mine.txt"
    job = textwrap.dedent("""\
        import os, sys, tensorgauge
        with tensorgauge.phase("before"):
            pass
        os.closerange(3, 256)
        with open(sys.argv[1], "w") as f:
            f.write("mine\\n")
            f.flush()
            with tensorgauge.phase("after"):
                pass
        """)
    assert main(["run", "-q", "--", PY, "-c", job, str(mine)]) == 0
    assert mine.read_text() == "mine\n"
    store = Store.open(store_path)
    names = [e.data.get("name") for e in store.events(store.run("last").run_id) if e.kind == "phase_begin"]
    assert names == ["before", "after"]  # the hook opened its file again by its name


def test_a_line_nested_100000_deep_is_skipped_and_recording_goes_on(store_path):
    job = textwrap.dedent("""\
        import json, os, time
        fd = os.open(os.environ["TENSORGAUGE_EVENTS"], os.O_WRONLY | os.O_APPEND)
        deep = '{"t":%r,"kind":"trace","function":"f","x":%s%s}\\n' % (time.monotonic(), "[" * 100000, "]" * 100000)
        os.write(fd, deep.encode())
        time.sleep(0.5)
        import tensorgauge
        with tensorgauge.phase("after"):
            time.sleep(0.3)
        """)
    assert main(["run", "-q", "--", PY, "-c", job]) == 0
    store = Store.open(store_path)
    record = store.run("last")
    assert record.recording_error is None and record.events_skipped == 1
    assert len(store.samples(record.run_id)) == record.samples_taken >= 5
    assert "after" in [e.data.get("name") for e in store.events(record.run_id) if e.kind == "phase_begin"]


FILL_AND_FREE = textwrap.dedent("""\
    import os, tensorgauge, tensorgauge.hook.channel
    events = os.environ["TENSORGAUGE_EVENTS"]
    with tensorgauge.phase("before"):
        pass
    if os.path.getsize(events) % 4096 == 0:  # the next line must start inside a page, to be cut short
        with tensorgauge.phase("align"):
            pass
    filler = os.path.join(os.path.dirname(events), "filler")
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError:
            pass
    channel = tensorgauge.hook.channel.channel()
    for i in range(31):  # the first cut short by the full filesystem, the others not written
        channel.emit("trace", function="lost " + "x" * 5000)
    os.remove(filler)
    with tensorgauge.phase("after"):
        pass
    """)


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 256 KiB tmpfs (root only): a filesystem the job can fill."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (root only)")
    yield str(mount)
    subprocess.run(["umount", "-l", str(mount)], check=True)


def test_events_lost_on_a_full_filesystem_are_counted_in_the_run(store_path, monkeypatch, tiny_tmpfs):
    """/dev/shm full: a short write left a torn line, the event carrying `lost_before` was then discarded
    as torn with it, and the run said nothing of the 31 events lost."""
    from tensorgauge.monitoring import run_files

    monkeypatch.setattr(run_files, "private_parent", lambda: tiny_tmpfs)
    assert main(["run", "-q", "--", PY, "-c", FILL_AND_FREE]) == 0
    store = Store.open(store_path)
    record = store.run("last")
    assert record.events_dropped == 31 and record.events_skipped is None
    names = [e.data.get("name") for e in store.events(record.run_id) if e.kind == "phase_begin"]
    assert names[0] == "before" and names[-1] == "after"
    assert not [e for e in store.events(record.run_id) if e.kind == "trace"]


SHORT_WRITE = textwrap.dedent("""\
    import os, resource, signal, sys
    from tensorgauge.hook.channel import Channel
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: EFBIG, not death
    channel = Channel(sys.argv[1])
    channel.emit("phase_begin", id=1, name="before")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(sys.argv[1]) + 100, hard))
    for i in range(5):  # the first written 100 bytes short of its end, the others not at all
        channel.emit("phase_begin", id=2 + i, name="x" * 500)
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    channel.emit("phase_begin", id=9, name="after")
    """)


def test_a_write_cut_short_by_a_file_size_limit_leaves_no_torn_line(tmp_path):
    """The same short write without root: RLIMIT_FSIZE cuts the line; it is taken back and counted."""
    from tensorgauge.hook.channel import EventReader

    path = tmp_path / "events.jsonl"
    path.write_text("")
    subprocess.run([PY, "-c", SHORT_WRITE, str(path)], check=True, timeout=30)
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2 and path.read_bytes().endswith(b"\n")
    reader = EventReader(str(path))
    before, after = reader.read_new()
    assert before["name"] == "before" and after["name"] == "after" and after["lost_before"] == 5
    assert reader.skipped == 0


# -- the same faults on the reader and the channel alone -------------------------------------------

def line(kind: str, **data) -> bytes:
    import json

    return (json.dumps({"t": 1.0, "kind": kind, **data}) + "\n").encode()


def test_a_torn_end_taken_back_and_written_again_is_read_once(tmp_path):
    """The hook takes a short write back (ftruncate) and the next event takes its place: the reader,
    which had read the torn part, used to take the file for rewritten and read it all again."""
    from tensorgauge.hook.channel import EventReader

    path = tmp_path / "events.jsonl"
    path.write_bytes(line("a") + line("b") + line("c", name="x" * 200)[:100])
    reader = EventReader(str(path))
    assert [e["kind"] for e in reader.read_new()] == ["a", "b"]
    with open(path, "r+b") as f:
        f.truncate(len(line("a") + line("b")))
        f.seek(0, os.SEEK_END)
        f.write(line("d", name="y" * 300))
    assert [e["kind"] for e in reader.read_new()] == ["d"] and reader.skipped == 0


def test_lines_too_deep_too_long_or_torn_are_skipped_counted_and_reading_goes_on(tmp_path):
    from tensorgauge.hook.channel import EventReader

    path = tmp_path / "events.jsonl"
    deep = b'{"t": 1, "kind": "trace", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    nested = b'{"t": 1, "kind": "trace", "x": ' + b"[" * 100 + b"]" * 100 + b"}\n"  # parses, but too deep to keep
    torn = line("steps", seconds=[0.1] * 50)[:40]  # a process killed mid-write, then another's whole line
    path.write_bytes(line("a") + deep + nested + torn + line("b") + b"x" * (5 << 20))  # no event is 5 MiB
    reader = EventReader(str(path), max_bytes=1 << 20)
    kinds = []
    while not kinds or not reader.at_end:
        kinds += [e["kind"] for e in reader.read_new()]
    with open(path, "ab") as f:
        f.write(b"x" * 100 + b"\n" + line("c"))  # the end of the overlong line, then an event
    kinds += [e["kind"] for e in reader.read_new()]
    assert kinds == ["a", "b", "c"] and reader.skipped == 4


def test_a_value_nested_a_million_deep_is_measured_without_recursion():
    from tensorgauge.hook.channel import MAX_DEPTH, depth

    value: list = []
    for _ in range(1_000_000):
        value = [value]
    assert depth(value) == MAX_DEPTH + 1 and depth({"a": [1, {"b": []}]}) == 4 and depth(3) == 0


@pytest.mark.parametrize("side", ["hook", "reader"])
def test_neither_side_of_the_channel_blocks_on_a_fifo(tmp_path, side):
    """A FIFO with no one at its other end: open() for writing (the hook after a fork) or for reading
    (the monitor) blocked for ever."""
    path = tmp_path / "events.jsonl"
    os.mkfifo(path)
    code = ("import sys\nfrom tensorgauge.hook.channel import Channel, EventReader\n"
            + ("c = Channel(sys.argv[1]); c.emit('x'); assert c.broken\n" if side == "hook" else
               "r = EventReader(sys.argv[1]); assert r.read_new() == [] and 'not a regular file' in r.tampered\n"))
    subprocess.run([PY, "-c", code, str(path)], check=True, timeout=20)


def epochs_job(epochs: int, after: str = "") -> str:
    """A job that marks a fit of ``epochs`` one-step epochs with the hook's own phases (``after``: code run
    inside the fit after them)."""
    return ("import tensorgauge\n"
            "from tensorgauge.hook.channel import channel\n"
            "with tensorgauge.phase('fit', 'fit'):\n"
            f"    for i in range({epochs}):\n"
            "        with tensorgauge.phase(f'epoch {i}', 'epoch'):\n"
            "            tensorgauge.step()\n"
            + textwrap.indent(after, "    "))


def shown(store_path) -> str:
    return subprocess.run([PY, "-m", "tensorgauge", "show", "last"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TENSORGAUGE_STORE": str(store_path), "COLUMNS": "200"}).stdout


def test_past_what_a_run_keeps_each_phase_kept_keeps_its_end_and_the_steps_of_the_rest_count(store_path, monkeypatch):
    """3,000 one-step epochs in a run that keeps 2,000 of the job's events: the fit and 999 epochs, each with
    its end; the other epochs' steps count in the fit. Their ends used to be dropped with the rest: "fit (cut)",
    "The job ended inside 'epoch 998'" for a job that closed every phase, and a step digest kept for each
    epoch read (100,000 epochs: ~550 MB in the monitor)."""
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.monitoring import recorder

    monkeypatch.setattr(recorder, "MAX_EVENTS", 2000)
    assert main(["run", "-q", "--", PY, "-c", epochs_job(3000)]) == 0
    store = Store.open(store_path)
    report = RunReport.load(store, "last")
    fit, *epochs = report.phases
    assert fit.name == "fit" and fit.complete and fit.steps == 3000
    assert len(epochs) == 999 and all(p.complete for p in epochs)
    kinds = [e.kind for e in store.events(report.record.run_id)]
    assert kinds.count("step_digest") == kinds.count("phase_begin") == 1000
    assert report.record.events_dropped >= 2 * 2001  # the epochs not kept, begin and end (and the hook's exit)
    assert "(cut)" not in shown(store_path)


def test_a_phase_whose_end_was_left_unread_reads_as_not_recorded_never_as_the_jobs_end_inside_it(store_path):
    """Inside its fit, the job writes 20 MB of events at once through the hook's emitter: more than the
    monitor reads after the job's end (8 MiB), so the ends of the epoch and the fit are left unread. They read
    as not recorded, and the account says events were dropped; never "cut" nor "the job ended inside"."""
    from tensorgauge.analyse.run_report import RunReport

    flood = "for _ in range(20_000):\n    channel().emit('trace', function='f', origin='user', where='x' * 1000)\n"
    job = epochs_job(1, after="with tensorgauge.phase('epoch 1', 'epoch'):\n" + textwrap.indent(flood, "    "))
    done = run_monitor(["--", PY, "-c", job], {**os.environ, "TENSORGAUGE_STORE": str(store_path)}, timeout=120)
    assert done.returncode == 0, done.stderr
    report = RunReport.load(Store.open(store_path), "last")
    assert [(p.name, p.complete, p.end_dropped) for p in report.phases] == [
        ("fit", False, True), ("epoch 0", True, False), ("epoch 1", False, True)]
    assert report.record.events_dropped and report.record.events_dropped > 5000
    text = shown(store_path)
    assert "fit (end not recorded: events dropped)" in text and "(cut)" not in text
    assert "The job ended inside" not in text
    assert "events from the job were dropped (more than a run keeps, or lost unread); the end of 'fit'" in text
