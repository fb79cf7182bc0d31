"""Live observers: the run's state folded from samples and events, the terminal view,
TensorBoard scalars on Keras' step and epoch axes."""

import io
import sys

import pytest
from conftest import needs_tf
from rich.console import Console

from tensorgauge.cli import main
from tensorgauge.live.state import LiveState
from tensorgauge.live.view import LiveView
from tensorgauge.model import Event, GpuReading, RunRecord, Sample


def sample(t, busy=1.5):
    return Sample(t=t, cpu_seconds=t, cores_busy=busy, rss_bytes=600 << 20, threads=12, processes=1,
                  mem_used_bytes=4 << 30, mem_available_bytes=12 << 30, cpu_percent=[80.0, 70.0],
                  gpus=[GpuReading(index=0, name="H100", util_percent=55.0, memory_used_bytes=2 << 30,
                                   memory_total_bytes=80 << 30)])


def begin(t, id_, name, kind):
    return Event(t=t, pid=7, kind="phase_begin", data={"id": id_, "name": name, "phase_kind": kind})


def steps(t, n, seconds=0.01):
    return Event(t=t, pid=7, kind="steps", data={"phase": 2, "seconds": [seconds] * n,
                                                 "ends": [t - seconds * (n - 1 - i) for i in range(n)]})


def test_live_state_follows_phases_steps_and_epochs():
    state = LiveState()
    state.update(sample(1.0), [begin(1.0, 1, "fit", "fit"), begin(1.0, 2, "epoch 1", "epoch")])
    assert state.phase == "epoch 1" and state.phase_path == "fit > epoch 1"
    state.update(sample(2.0), [steps(2.0, 100)])
    assert state.steps_total == 100 and state.step_rate == pytest.approx(100, rel=0.02)
    state.update(sample(9.0), [Event(t=8.0, pid=7, kind="phase_end", data={"id": 2})])
    assert state.phase == "fit" and state.epoch_ends == [(0, 8.0)]
    assert state.step_rate == 0.0  # nothing in the last 5 s


def test_live_view_draws_cores_memory_gpu_phase_and_steps():
    out = io.StringIO()
    view = LiveView(Console(file=out, force_terminal=True, width=120))
    view.start(RunRecord(run_id="run-1", command=["x"], started_at="2026", env={"host": {"cores_allowed": 2.0}}))
    view.observe(sample(1.0), [begin(1.0, 1, "fit", "fit"), begin(1.0, 2, "epoch 1", "epoch")])
    view.observe(sample(2.0), [steps(2.0, 50)])
    view.close()
    text = out.getvalue()
    assert "1.50 of 2" in text and "fit > epoch 1" in text and "50 ·" in text
    assert "55%" in text and "600.0 MiB" in text
    assert "threads 12" in text and "processes 1" in text  # the other shown metrics, on one row


def test_live_is_quiet_when_not_a_terminal(store_path, capsys):
    assert main(["run", "--live", "--", sys.executable, "-c", "import time; time.sleep(0.3)"]) == 0
    captured = capsys.readouterr()
    assert "of 2" not in captured.err and "█" not in captured.err and "phase " not in captured.err


def test_tensorboard_folder_that_cannot_be_made(store_path, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", "--tensorboard", str(blocker / "logs"), "--", sys.executable, "-c", "pass"]) == 2
    assert "cannot create" in capsys.readouterr().err
    assert not store_path.exists()


KERAS_WITH_TENSORBOARD = """
import sys, keras, numpy as np
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(64), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(np.zeros((4000, 8)), np.zeros((4000, 1)), epochs=3, batch_size=16, verbose=0,
          callbacks=[keras.callbacks.TensorBoard(sys.argv[1], update_freq="batch")])
"""


@needs_tf
@pytest.mark.tf
def test_tensorboard_scalars_share_keras_step_and_epoch_axes(store_path, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = tmp_path / "logs"
    assert main(["run", "-q", "--tensorboard", str(logdir), "--", sys.executable, "-c", KERAS_WITH_TENSORBOARD,
                 str(logdir)]) == 0
    ours, keras_run = EventAccumulator(str(logdir / "tensorgauge")), EventAccumulator(str(logdir / "train"))
    ours.Reload()
    keras_run.Reload()
    epochs = [e.step for e in ours.Scalars("tensorgauge/epoch/cores_busy")]
    assert epochs == [e.step for e in keras_run.Tensors("epoch_loss")] == [0, 1, 2]
    busy = ours.Scalars("tensorgauge/step/cores_busy")
    steps = [e.step for e in busy]
    assert steps == sorted(steps) and steps[-1] == 750  # 3 epochs of 250 batches: Keras' own batch count
    assert max(e.step for e in keras_run.Tensors("batch_loss")) <= 750
    assert max(e.value for e in busy) > 0.5 and ours.Scalars("tensorgauge/step/rss_gib")[-1].value > 0.1
