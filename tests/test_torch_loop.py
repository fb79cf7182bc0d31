"""A custom training loop on Keras' PyTorch backend, run for real: its steps are its torch.optim
steps, its epochs the DataLoader's passes, its validation loop an evaluation pass; its input wait is
timed every step, and judged by round. That test skips where PyTorch is not installed
(``make test`` does not install it: its wheel is ~0.5 GB); the wiring is also tested on stand-ins."""

import json
import os
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


def test_a_plain_pytorch_loop_without_keras_gets_its_steps_and_an_input_verdict(store_path, tg_cmd, tmp_path):
    """No Keras at all: the loop is seen from ``import torch``; its collate works in Python, and its
    waits in next() give an input verdict by round. TENSORGAUGE_TEST_TORCH_PYTHON names an interpreter
    with PyTorch where the test's own has none."""
    python = os.environ.get("TENSORGAUGE_TEST_TORCH_PYTHON", sys.executable)
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode:
        pytest.skip("PyTorch is not installed")
    truth_path = tmp_path / "truth.json"
    result = subprocess.run([*tg_cmd, "run", "-q", "--", python, str(JOBS / "torch_plain_loop.py"), str(truth_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = RunReport.load(Store.open(store_path), "last")
    truth = json.loads(truth_path.read_text())
    index, loop = next((i, p) for i, p in enumerate(report.phases) if p.name == "train loop")
    assert loop.steps == sum(truth["steps"])
    assert [p.steps for p in report.phases if p.kind == "epoch" and p.parent == index] == truth["steps"]
    assert any(p.kind == "import" and "torch" in p.name for p in report.phases)
    split = report.input_split or {}
    assert split.get("measured") and "by round" in split["measured_by"]
    finding = next((f for f in report.findings if f.id == "input_bound"), None)
    if finding is not None:
        assert "num_workers" in finding.fix


def stand_in_torch(monkeypatch, loader_iterator: type) -> list:
    """PyTorch's optimizer hook registry and DataLoader iterator, stood in for; returns the hooks registered."""
    import types

    from tensorgauge.hook import torch_loop

    hooks: list = []
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setitem(sys.modules, "torch.optim.optimizer",
                        types.SimpleNamespace(register_optimizer_step_post_hook=hooks.append))
    monkeypatch.setitem(sys.modules, "torch.utils.data.dataloader",
                        types.SimpleNamespace(_BaseDataLoaderIter=loader_iterator))
    monkeypatch.setattr(torch_loop, "_registered", [])
    return hooks


def test_torch_steps_and_loader_waits_reach_the_loop_on_stand_ins(monkeypatch):
    """The wiring, where PyTorch is not installed: its optimizer hook registry and DataLoader iterator
    stood in for, the loop's own logic (tests/test_train_loop*.py) recorded."""
    import types

    from tensorgauge.hook import torch_loop, train_loop

    class LoaderIterator:
        _index_sampler = types.SimpleNamespace(batch_size=16)

        def __next__(self):
            return "batch"

    hooks = stand_in_torch(monkeypatch, LoaderIterator)
    seen: list = []
    loop = types.SimpleNamespace(batch_size=None, after_step=lambda: None,
                                 train_step=lambda began, eager: seen.append(("step", eager)),
                                 on_next=lambda iterator, began, seconds, loader=None: seen.append(("next", loader)))
    monkeypatch.setattr(train_loop, "_loop", loop)
    monkeypatch.setattr(train_loop, "_in_keras_phase", lambda: False)
    torch_loop._patch_torch(None)
    torch_loop._patch_torch(None)  # Keras imported twice (reloaded): one hook, one wrapper
    assert hooks == [torch_loop.after_optimizer_step]
    assert next(LoaderIterator()) == "batch"
    hooks[0](object(), (), {})
    assert seen == [("next", "DataLoader"), ("step", False)] and loop.batch_size == 16
    monkeypatch.setattr(train_loop, "_in_keras_phase", lambda: True)  # inside fit: Keras' own steps
    hooks[0](object(), (), {})
    assert seen == [("next", "DataLoader"), ("step", False)]


def test_a_plain_pytorch_import_patches_its_loop_without_keras(monkeypatch):
    """A PyTorch program with no Keras (a tutorial's own loop): the import watcher's ``torch`` import alone
    registers the optimizer hook and wraps the DataLoader iterator."""
    from tensorgauge.hook import imports, patches, torch_loop

    class LoaderIterator:
        def __next__(self):
            return "batch"

    hooks = stand_in_torch(monkeypatch, LoaderIterator)
    assert "torch" in imports.WATCHED
    patches.on_imported("torch", sys.modules["torch"])
    assert hooks == [torch_loop.after_optimizer_step]
    assert getattr(LoaderIterator.__next__, "__wrapped__", None) is not None


def test_a_dataloader_loop_waiting_for_input_is_told_num_workers_without_keras():
    """The fix names the DataLoader's workers where the loop's iterator was one, Keras or not."""
    from tensorgauge.analyse.input_rules import loop_input_bound
    from tensorgauge.model import Phase

    fit = Phase(name="train loop", kind="fit", start=1.0, end=15.0, cores_busy_mean=1.3, step_seconds_p50=0.0073,
                steps=1000)
    rounds = [[0.0025 + 0.0001 * (i % 3), 0.0073, 8] for i in range(12)]
    finding = loop_input_bound({"next_rounds": rounds, "step_seconds_p50": 0.0073, "loader": "DataLoader"}, fit, 2.0)
    assert finding is not None and "num_workers" in finding.fix
    other = loop_input_bound({"next_rounds": rounds, "step_seconds_p50": 0.0073}, fit, 2.0)
    assert other is not None and "num_workers" not in other.fix
