"""A custom training loop on Keras' PyTorch backend, run for real: its steps are its torch.optim
steps, its epochs the DataLoader's passes, its validation loop an evaluation pass; its input wait is
timed every step, and judged by round. That test skips where PyTorch is not installed
(``make test`` does not install it: its wheel is ~0.5 GB); the wiring is also tested on stand-ins."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.store import Store

JOBS = Path(__file__).parent / "jobs"


def test_a_torch_custom_loop_is_counted_by_its_optimizer_steps_with_its_evaluation(store_path, tg_cmd, tmp_path):
    pytest.importorskip("torch", reason="PyTorch is not installed")
    truth_path = tmp_path / "truth.json"
    result = subprocess.run([*tg_cmd, "run", "-q", "--", sys.executable, str(JOBS / "torch_loop.py"), str(truth_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = RunReport.load(Store.open(store_path), "last")
    truth = json.loads(truth_path.read_text())
    index, loop = next((i, p) for i, p in enumerate(report.phases) if p.name == "train loop")
    assert loop.steps == sum(truth["steps"])  # every optimizer.step(), the validation calls not among them
    epochs = [p for p in report.phases if p.kind == "epoch" and p.parent == index]
    assert [p.steps for p in epochs] == truth["steps"]  # a new DataLoader pass, a new epoch
    evaluation = [p for p in report.phases if p.kind == "evaluate"]
    assert sum(p.steps or 0 for p in evaluation) == truth["validation_batches"]
    config = next(e.data for e in report.events if e.kind == "fit_config" and e.data.get("loop"))
    assert config["backend"] == "torch" and config["eager"] is False  # no tf.function advice for PyTorch
    assert config["batch_size"] == 32  # read from the DataLoader
    split = report.input_split or {}
    # A DataLoader is not paired with a cached batch: its waits, timed every step, give rounds with an
    # interval once there are three (of 8 steps and 0.25 s each); a loader of tensors in memory costs nothing.
    if split.get("measured"):
        assert "by round" in split["measured_by"] and not split["established"]
    else:
        assert "DataLoader" in split["why"]
    found = {f.id: f for f in report.findings}
    assert "input_bound" not in found and "eager_execution" not in found
    if "small_batch" in found:
        assert "torch.compile" in found["small_batch"].fix
    show = subprocess.run([*tg_cmd, "show", "last"], capture_output=True, text=True)
    assert ("by round" if split.get("measured") else "not measured: the loop's next() calls were not paired") \
        in show.stdout.replace("\n", " ")


def test_torch_steps_and_loader_waits_reach_the_loop_on_stand_ins(monkeypatch):
    """The wiring, where PyTorch is not installed: its optimizer hook registry and DataLoader iterator
    stood in for, the loop's own logic (tests/test_train_loop*.py) recorded."""
    import types

    from tensorgauge.hook import torch_loop, train_loop

    class LoaderIterator:
        _index_sampler = types.SimpleNamespace(batch_size=16)

        def __next__(self):
            return "batch"

    hooks: list = []
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setitem(sys.modules, "torch.optim.optimizer",
                        types.SimpleNamespace(register_optimizer_step_post_hook=hooks.append))
    monkeypatch.setitem(sys.modules, "torch.utils.data.dataloader",
                        types.SimpleNamespace(_BaseDataLoaderIter=LoaderIterator))
    monkeypatch.setattr(torch_loop, "_registered", [])
    seen: list = []
    loop = types.SimpleNamespace(batch_size=None, after_step=lambda: None,
                                 train_step=lambda began, eager: seen.append(("step", eager)),
                                 on_next=lambda iterator, began, seconds: seen.append("next"))
    monkeypatch.setattr(train_loop, "_loop", loop)
    monkeypatch.setattr(train_loop, "_in_keras_phase", lambda: False)
    torch_loop._patch_torch(None)
    torch_loop._patch_torch(None)  # Keras imported twice (reloaded): one hook, one wrapper
    assert hooks == [torch_loop.after_optimizer_step]
    assert next(LoaderIterator()) == "batch"
    hooks[0](object(), (), {})
    assert seen == ["next", ("step", False)] and loop.batch_size == 16
    monkeypatch.setattr(train_loop, "_in_keras_phase", lambda: True)  # inside fit: Keras' own steps
    hooks[0](object(), (), {})
    assert seen == ["next", ("step", False)]
