"""TensorFlow's profiler over a few training steps of a fit: *how* input costs a step.

Its trace gives, per step, the time spent in ``IteratorGetNext`` (waiting for the
input pipeline: Keras fetches the batch inside the compiled train function) and
the train function's own time, and the time tf.data's own threads were busy
(input work competing with the step for the cores). It explains an input cost
that the A/B (:mod:`.input_ab`) has established; it does not decide whether
there is one. Sent as one ``input_probe`` event; the trace files are deleted
and TensorFlow's log lines about the profiler are kept off the job's stderr.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import statistics
import sys
import tempfile
import time

from tensorgauge.hook.channel import channel
from tensorgauge.hook.protocol import Kind, error_text

WINDOW_STEPS = 10
_GET_NEXT = "IteratorGetNextOp::DoCompute"
_COLLECTIVES = ("CollectiveReduce", "CollectiveGather", "CollectiveAllToAll", "NcclAllReduce", "AllReduce")
_INPUT_THREADS = ("tf_data_private_threadpool", "tf_data_iterator_resource")  # not get_next: that is the wait
_PROFILER_LOG = (b"profiler_session.cc:", b"save_profile.cc:", b"profiler_client.cc:", b"xplane_to_")


@contextlib.contextmanager
def quiet_profiler_logs():
    """Keep TensorFlow's log lines about the profiler (written by C++ to fd 2) off the job's stderr;
    anything else written meanwhile is passed on."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [line for line in caught.read().splitlines(keepends=True)
                    if not any(marker in line for marker in _PROFILER_LOG)]
            if kept:
                with contextlib.suppress(OSError):
                    os.write(2, b"".join(kept))


def _busy_seconds(events) -> float:
    """The time a thread's line was busy: the union of its events (nested ones counted once)."""
    busy, end = 0, -1
    for event in sorted(events, key=lambda e: e.offset_ps):
        stop = event.offset_ps + event.duration_ps
        if stop > end:
            busy += stop - max(event.offset_ps, end)
            end = stop
    return busy / 1e12


class ProfilerWindow:
    """Profiles ``steps`` training steps (see the module doc)."""

    def __init__(self, steps: int = WINDOW_STEPS, allowance_seconds: float | None = None):
        self.steps = steps
        self.allowance_seconds = allowance_seconds
        self.active = False
        self.start_seconds = self.stop_seconds = 0.0
        self.logdir: str | None = None
        self.step_starts: list[float] = []
        self.compute_seconds: float | None = None  # the median step less its input wait, once finished

    def start(self) -> bool:
        try:
            import tensorflow as tf

            began = time.monotonic()
            self.logdir = tempfile.mkdtemp(prefix="tensorgauge-profile-")
            with quiet_profiler_logs():
                tf.profiler.experimental.start(self.logdir)
            self.start_seconds = time.monotonic() - began
            self.active = True
        except Exception as exc:
            channel().emit(Kind.INPUT_PROBE, error=error_text(exc))
        return self.active

    def on_step_begin(self, now: float) -> bool:
        """Marks a step; True once the window is over."""
        self.step_starts.append(now)
        if len(self.step_starts) > self.steps:
            self.finish()
            return True
        return False

    def finish(self) -> None:
        """Stop the profiler (at the window's end, or when fit ends first) and report."""
        if not self.active:
            return
        self.active = False
        try:
            import tensorflow as tf

            began = time.monotonic()
            with quiet_profiler_logs():
                tf.profiler.experimental.stop()
            steps = [b - a for a, b in zip(self.step_starts, self.step_starts[1:])]
            waits, functions, copies, totals = self._trace_seconds(len(steps))
            self.stop_seconds = time.monotonic() - began
            if steps and waits:
                self.compute_seconds = max(0.0, statistics.median(steps) - statistics.median(waits))
            channel().emit(Kind.INPUT_PROBE, step_seconds=steps, get_next_seconds=waits, function_seconds=functions,
                           copies=len(copies), copy_seconds=sum(copies), **totals,
                           start_seconds=self.start_seconds, stop_seconds=self.stop_seconds,
                           allowance_seconds=self.allowance_seconds)
        except Exception as exc:
            channel().emit(Kind.INPUT_PROBE, error=error_text(exc))
        finally:
            if self.logdir is not None:
                shutil.rmtree(self.logdir, ignore_errors=True)

    def _trace_seconds(self, steps: int) -> tuple[list[float], list[float], list[float], dict[str, float]]:
        """Per step, in order: IteratorGetNext's duration, and the train function's
        (Keras names it ``*_on_iterator``; the rest of a step is Keras' Python loop);
        the durations of the window's host<->GPU copies (``Memcpy*`` on a GPU plane); and
        window totals: ``collective_seconds`` (all-reduce ops: time a worker waits for the
        others), ``input_work_seconds`` (tf.data's root iterator producing elements) and
        ``input_thread_seconds`` (the time tf.data's own threads were busy: its maps and
        prefetching, which compete with the train step for the cores)."""
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        paths = glob.glob(os.path.join(self.logdir or "", "**", "*.xplane.pb"), recursive=True)
        space = xplane_pb2.XSpace()
        with open(paths[0], "rb") as f:
            space.ParseFromString(f.read())
        waits: list[tuple[int, float]] = []
        functions: list[tuple[int, float]] = []
        copies: list[float] = []
        totals = {"collective_seconds": 0.0, "input_work_seconds": 0.0, "input_thread_seconds": 0.0}
        for plane in space.planes:
            names = {key: meta.name for key, meta in plane.event_metadata.items()}
            gpu = plane.name.startswith("/device:GPU:")
            for line in plane.lines:
                if line.name.startswith(_INPUT_THREADS):
                    totals["input_thread_seconds"] += _busy_seconds(line.events)
                for event in line.events:
                    name = names.get(event.metadata_id, "")
                    op_type = name.rsplit(":", 1)[-1]
                    if op_type.startswith(_COLLECTIVES):
                        totals["collective_seconds"] += event.duration_ps / 1e12
                    elif name == "Iterator::Root":
                        totals["input_work_seconds"] += event.duration_ps / 1e12
                    if gpu and name.startswith("Memcpy") and ("HtoD" in name or "DtoH" in name or "H2D" in name
                                                              or "D2H" in name):
                        copies.append(event.duration_ps / 1e12)
                    at = (line.timestamp_ns * 1000 + event.offset_ps, event.duration_ps / 1e12)
                    if name == _GET_NEXT:
                        waits.append(at)
                    elif line.name == "python" and name.endswith("_on_iterator"):
                        functions.append(at)
        return [s for _, s in sorted(waits)[:steps]], [s for _, s in sorted(functions)[:steps]], copies, totals


