"""Which part of a PyTorch DataLoader's input costs: the user's dataset ``__getitem__`` (``__iter__``) and
collate function named with their file:line and timed on their own per batch, on the loop's own batches
(num_workers=0) or made again as the loop ends (workers); the fix fitted to the stage. The logic on
stand-ins; two real plain-PyTorch jobs whose collate sleeps ten times what their samples do (skipped
where PyTorch is not installed; TENSORGAUGE_TEST_TORCH_PYTHON names an interpreter that has it)."""

import functools
import io
import os
import subprocess
import sys
import types
import weakref
from pathlib import Path

import pytest
from rich.console import Console

from tensorgauge.analyse.input_rules import loop_input_bound
from tensorgauge.analyse.input_stages import stage_fix, stage_rows
from tensorgauge.analyse.run_report import RunReport
from tensorgauge.hook import loader_stages
from tensorgauge.hook.loader_stages import FetchWindow, LoaderStages, named_stages, remade_batches
from tensorgauge.hook.protocol import DIAGNOSE_ENV
from tensorgauge.model import Event, Phase
from tensorgauge.render.terminal import render_stages
from tensorgauge.store import Store

JOB = Path(__file__).parent / "jobs" / "torch_loader_stages.py"


class Clock:
    """A clock that the stand-in dataset and collate advance by what they cost."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Samples:
    """A map-style dataset of the user's: each sample costs 1 ms of the clock."""

    def __init__(self, clock, rows=100):
        self.clock, self.rows = clock, rows

    def __len__(self):
        return self.rows

    def __getitem__(self, index):
        self.clock.now += 0.001
        return index


def make_collate(clock):
    def joined(samples):
        clock.now += 0.01 * len(samples) / 4  # 10 ms a batch of 4: ten times the samples'
        return list(samples)
    return joined


class Fetcher:
    """torch's _MapDatasetFetcher, stood in for: the samples, then collate_fn on them."""

    def __init__(self, dataset, collate_fn):
        self.dataset, self.collate_fn = dataset, collate_fn

    def fetch(self, index):
        return self.collate_fn([self.dataset[i] for i in index])


class Sampler:
    def __init__(self, data_source):
        self.data_source = data_source


class BatchSampler:
    def __init__(self, batch_size, sampler):
        self.batch_size, self.sampler = batch_size, sampler


class Iterator:
    """A single-process DataLoader iterator, stood in for (the attributes the hook reads)."""

    def __init__(self, dataset, collate, workers=0, batch=4):
        self._dataset, self._collate_fn, self._num_workers = dataset, collate, workers
        self._auto_collation, self._dataset_kind = True, 0
        self._index_sampler = BatchSampler(batch, Sampler(dataset))
        self._dataset_fetcher = Fetcher(dataset, collate)


def test_the_window_times_the_samples_and_the_collate_apart_and_puts_the_fetcher_back():
    clock = Clock()
    fetcher = Fetcher(Samples(clock), make_collate(clock))
    collate = fetcher.collate_fn
    times: list = []
    FetchWindow(fetcher, times, batches=2, clock=clock, cpu=clock)
    assert fetcher.fetch([0, 1, 2, 3]) == [0, 1, 2, 3]
    assert times == [pytest.approx((0.004, 0.01, 0.004, 0.01))]
    fetcher.fetch([4, 5, 6, 7])
    assert len(times) == 2 and "fetch" not in vars(fetcher) and fetcher.collate_fn is collate  # put back
    fetcher.fetch([0])
    assert len(times) == 2  # nothing timed after the window


def default_collate(samples):
    return samples


default_collate.__module__ = "torch.utils.data._utils.collate"  # torch's own, stood in for


def test_the_stages_are_named_through_a_subset_with_the_users_file_and_line():
    clock = Clock()
    subset = types.SimpleNamespace(dataset=Samples(clock))  # a library wrapper: random_split's Subset
    samples, joins = named_stages(Samples(clock), make_collate(clock), iterable=False)
    assert samples["stage"] == "Dataset.__getitem__" and samples["function"] == "Samples.__getitem__"
    assert samples["location"] == f"test_torch_stages.py:{Samples.__getitem__.__code__.co_firstlineno}"
    assert joins["stage"] == "collate_fn" and joins["function"] == "make_collate.<locals>.joined"
    through, _ = named_stages(subset, make_collate(clock), iterable=False)
    assert through["function"] == "Samples.__getitem__"
    assert named_stages(Samples(clock), default_collate, False)[1]["function"] == "default collate"
    partial = functools.partial(make_collate, clock)
    assert named_stages(Samples(clock), partial, False)[1]["function"] == "make_collate"


def test_a_loader_without_workers_is_timed_on_the_loops_own_batches_across_epochs(monkeypatch, events):
    monkeypatch.setenv(DIAGNOSE_ENV, "auto")
    clock = Clock()
    dataset, collate = Samples(clock), make_collate(clock)
    stages = LoaderStages(clock=clock, cpu=clock)
    monkeypatch.setattr(loader_stages, "WINDOW_BATCHES", 6)
    for epoch in range(2):
        iterator = Iterator(dataset, collate)
        for k in range(4):
            stages.watch(iterator)  # after the loop's next(): the batches after it are timed
            iterator._dataset_fetcher.fetch(list(range(4 * k, 4 * k + 4)))
        assert "fetch" not in vars(iterator._dataset_fetcher) or epoch == 0
    stages.watch(iterator)  # a next() after the window filled: sent
    sent = [e for e in events() if e["kind"] == "input_stages"]
    assert len(sent) == 1 and not stages.watching
    first, second = sent[0]["stages"]
    assert first["function"] == "Samples.__getitem__" and first["prefix_seconds_per_batch"] == pytest.approx(0.004)
    assert second["stage"] == "collate_fn" and second["prefix_seconds_per_batch"] == pytest.approx(0.014)
    assert first["workers"] == 0 and first["pulls"] == 6 and "6 of the loop's own batches" in sent[0]["measured_by"]
    stages.loop_ended(0.9, 1.0)
    assert not [e for e in events() if e["kind"] == "input_stages"]  # sent once


def test_a_loader_with_workers_is_timed_again_as_the_loop_ends_where_its_next_waited(monkeypatch, events):
    monkeypatch.setenv(DIAGNOSE_ENV, "auto")
    clock = Clock()
    dataset, collate = Samples(clock), make_collate(clock)
    stages = LoaderStages(clock=clock, cpu=clock)
    stages.watch(Iterator(dataset, collate, workers=2))
    assert not stages.watching and stages.held is not None
    stages.loop_ended(0.5, 0.2)
    sent = next(e for e in events() if e["kind"] == "input_stages")
    first, second = sent["stages"]
    assert first["workers"] == 2 and first["parallel"] and second["prefix_seconds_per_batch"] == pytest.approx(0.014)
    assert "made again in the job's process" in sent["measured_by"] and sent["cost_seconds"] > 0
    healthy = LoaderStages(clock=clock, cpu=clock)
    healthy.watch(Iterator(dataset, collate, workers=2))
    healthy.loop_ended(0.01, 0.2)
    assert "waited 1% of its steps, under 5%" in next(e for e in events() if e["kind"] == "input_stages")["skipped"]
    gone = LoaderStages(clock=clock, cpu=clock)
    gone.watch(Iterator(Samples(clock), collate, workers=2))  # its dataset freed before the loop ends
    gone.loop_ended(0.5, 0.2)
    assert "dataset was gone" in next(e for e in events() if e["kind"] == "input_stages")["skipped"]


def test_diagnosis_off_times_nothing(monkeypatch):
    monkeypatch.delenv(DIAGNOSE_ENV, raising=False)
    stages = LoaderStages()
    iterator = Iterator(Samples(Clock()), make_collate(Clock()))
    stages.watch(iterator)
    assert not stages.watching and "fetch" not in vars(iterator._dataset_fetcher)


def test_batches_made_again_from_a_list_and_a_short_stream():
    clock = Clock()
    collate = make_collate(clock)
    rows = [0] * 10
    times = remade_batches(rows, collate, iterable=False, batch_size=4, seconds=0.05, clock=clock, cpu=clock)
    assert len(times) >= 3 and times[0] == pytest.approx((0.0, 0.01, 0.0, 0.01))

    def stream():
        for i in range(10):
            clock.now += 0.001
            yield i

    short = remade_batches(Stream(stream), collate, True, 4, 1.0, clock, clock)
    assert len(short) == 1 and short[0][0] == pytest.approx(0.004)  # 10 samples: the first batch untimed, one timed


class Stream:
    def __init__(self, make):
        self.make = make

    def __iter__(self):
        return self.make()


def test_a_list_dataset_is_held_through_its_sampler_without_being_kept_alive():
    rows = [1, 2, 3]
    iterator = Iterator(rows, make_collate(Clock()))
    held = loader_stages._dataset_ref(iterator)
    assert held is not None and held() is rows
    del rows, iterator  # the loader (its sampler) gone: so is the dataset
    assert held() is None
    dataset = Samples(Clock())
    ref = loader_stages._dataset_ref(Iterator(dataset, None))
    assert isinstance(ref, weakref.ref) and ref() is dataset


def _loader_events(workers=0):
    stage = {"python": True, "random": False, "parallel": workers > 0, "reader": False, "before_shuffle": False,
             "elements_per_batch": 4, "element_bytes": None, "cardinality": 120, "workers": workers, "pulls": 32}
    stages = [{**stage, "stage": "Dataset.__getitem__", "function": "Rows.__getitem__", "location": "train.py:12",
               "prefix_seconds_per_batch": 0.004, "cores": 1.0},
              {**stage, "stage": "collate_fn", "function": "pad_batch", "location": "train.py:30",
               "prefix_seconds_per_batch": 0.044, "cores": 1.0}]
    return [Event(t=5.0, pid=1, kind="input_stages",
                  data={"stages": stages, "batch_size": 4, "measured_by": "32 of the loop's own batches (num_workers=0)",
                        "cost_seconds": 0.0})]


def test_the_slow_collate_leads_the_loops_fix_with_num_workers_naming_it():
    split = stage_rows(_loader_events())
    assert [r["share"] for r in split["stages"]] == [pytest.approx(0.0909, abs=1e-3), pytest.approx(0.9091, abs=1e-3)]
    assert "num_workers=N" in split["stages"][1]["fix"] and "pad_batch (train.py:30)" in split["stages"][1]["fix"]
    fit = Phase(name="train loop", kind="fit", start=1.0, end=15.0, cores_busy_mean=1.0, step_seconds_p50=0.05,
                steps=240)
    rounds = [[0.044 * 8, 0.05 * 8, 8] for _ in range(6)]
    loop = {"next_rounds": rounds, "step_seconds_p50": 0.05, "loader": "DataLoader", "steps": 240}
    finding = loop_input_bound(loop, fit, 2.0, None, split)  # type: ignore[arg-type]
    assert finding is not None
    assert finding.evidence["costliest_stage"]["function"] == "pad_batch"
    assert finding.evidence["costliest_stage"]["location"] == "train.py:30"
    assert finding.fix.startswith("The costliest stage is collate_fn pad_batch (train.py:30), 91%")
    with_workers = stage_rows(_loader_events(workers=3))
    assert "DataLoader's 3 workers" in with_workers["stages"][1]["fix"]
    assert "3 workers make them slower" in loop_input_bound(loop, fit, 2.0, None, with_workers).fix  # type: ignore
    default = stage_fix({"stage": "default collate", "function": "default collate", "workers": 0}, {}, None)
    assert default.startswith("default collate runs in the training process") and "num_workers" in default


def test_show_prints_the_loaders_stage_table_and_how_it_was_timed():
    out = io.StringIO()
    render_stages(Console(file=out, width=200, color_system=None), stage_rows(_loader_events()))
    text = out.getvalue()
    assert "over 32 of the loop's own batches (num_workers=0)" in text
    assert "pad_batch (train.py:30)" in text and "Rows.__getitem__ (train.py:12)" in text and "91%" in text


def test_only_the_training_iterators_next_is_watched(monkeypatch):
    from tensorgauge.hook import torch_loop, train_loop

    watched: list = []
    monkeypatch.setattr(loader_stages, "_loader", types.SimpleNamespace(watching=True, watch=watched.append))
    loop = types.SimpleNamespace(batch_size=None, last_iterator=None, train_iterator=None,
                                 on_next=lambda it, began, seconds, loader=None: setattr(loop, "last_iterator", it.serial))
    monkeypatch.setattr(train_loop, "_loop", loop)
    monkeypatch.setattr(train_loop, "_in_keras_phase", lambda: False)

    class LoaderIterator:
        def __init__(self, serial):
            self.serial = serial

        def __next__(self):
            return "batch"

    step = torch_loop._wrap_next(LoaderIterator.__next__)
    training, validation = LoaderIterator(1), LoaderIterator(2)
    step(training)  # before the first step: not yet the training iterator
    loop.train_iterator = 1
    step(training)
    step(validation)
    assert watched == [training]


# -- real plain-PyTorch jobs ---------------------------------------------------------------------------


def _torch_python() -> str:
    python = os.environ.get("TENSORGAUGE_TEST_TORCH_PYTHON", sys.executable)
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode:
        pytest.skip("PyTorch is not installed")
    return python


def _line_of(text: str) -> int:
    return next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if text in line)


def _record(tg_cmd, store_path, *args) -> RunReport:
    result = subprocess.run([*tg_cmd, "run", "-q", "--", _torch_python(), str(JOB), *args],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return RunReport.load(Store.open(store_path), "last")


def _assert_collate_costliest(report: RunReport, dataset_function: str, dataset_line: int) -> None:
    stages = (report.input_split or {}).get("stages") or []
    assert [s["stage"] for s in stages][1:] == ["collate_fn"], report.input_split
    assert stages[0]["function"] == dataset_function
    assert stages[0]["location"] == f"torch_loader_stages.py:{dataset_line}"
    top = max(stages, key=lambda s: s["share"])
    assert top["function"] == "slow_collate"
    assert top["location"] == f"torch_loader_stages.py:{_line_of('def slow_collate(')}"
    assert top["share"] >= 0.7, stages
    finding = next(f for f in report.findings if f.id == "input_bound")
    assert finding.evidence["costliest_stage"]["function"] == "slow_collate"
    assert finding.fix.startswith("The costliest stage is collate_fn slow_collate (torch_loader_stages.py:")
    assert "num_workers" in finding.fix


def test_a_plain_pytorch_loop_names_its_slow_collate_costliest_on_its_own_batches(store_path, tg_cmd):
    report = _record(tg_cmd, store_path)
    _assert_collate_costliest(report, "SlowSamples.__getitem__", _line_of("def __getitem__("))
    assert "of the loop's own batches (num_workers=0)" in (report.input_split or {})["stages_measured_by"]
    show = subprocess.run([*tg_cmd, "show", "last"], capture_output=True, text=True)
    assert "stages (source first)" in show.stdout and "slow_collate" in show.stdout


def test_a_loader_with_workers_has_its_iterable_dataset_and_collate_timed_as_the_loop_ends(store_path, tg_cmd):
    report = _record(tg_cmd, store_path, "--workers", "2", "--iterable")
    _assert_collate_costliest(report, "SlowStream.__iter__", _line_of("def __iter__("))
    assert "made again in the job's process" in (report.input_split or {})["stages_measured_by"]
    assert (report.input_split or {})["stages"][0]["stage"] == "IterableDataset.__iter__"
