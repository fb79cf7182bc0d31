"""Custom training loops, logic on a fake clock: steps, epochs, evaluation passes, input waits;
and the analysis of what the hook sends (phases nested in the loop, the input split, input_bound)."""

import pytest

from tensorgauge.analyse.input_rules import loop_input_bound
from tensorgauge.analyse.input_split import input_split
from tensorgauge.analyse.phases import build_phases
from tensorgauge.hook.agent import Agent
from tensorgauge.hook.train_loop import TrainLoop
from tensorgauge.model import Event, Phase


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def loop():
    clock = Clock()
    return TrainLoop(clock=clock, cpu=lambda: clock.now / 2, phases=Agent(clock=clock)), clock


def advance(clock, seconds):
    clock.now += seconds


def test_steps_are_updates_timed_end_to_end_with_their_waits(events, loop):
    loop, clock = loop
    iterator = object()
    for _ in range(5):
        began = clock.now
        advance(clock, 0.03)
        loop.on_next(iterator, began, 0.03)  # 30 ms in next()
        advance(clock, 0.01)  # 10 ms of compute
        loop.train_step(None, eager=True)
    loop.close()
    sent = events()
    begins = [e for e in sent if e["kind"] == "phase_begin"]
    assert [(e["name"], e["phase_kind"]) for e in begins] == [("train loop", "fit"), ("epoch 1", "epoch")]
    assert begins[0]["t"] == pytest.approx(100.0)  # where the first step began: its next()
    steps = [s for e in sent if e["kind"] == "steps" for s in e["seconds"]]
    assert steps == pytest.approx([0.04] * 5)
    summary = [e for e in sent if e["kind"] == "loop_input"][-1]
    assert summary["steps"] == 5 and summary["eager"] is True
    assert summary["next_seconds_total"] == pytest.approx(0.12)  # the first step (it traces) left out
    assert summary["step_seconds_total"] == pytest.approx(0.16)
    ends = [e for e in sent if e["kind"] == "phase_end"]
    assert [e["t"] for e in ends] == pytest.approx([100.2] * 2)  # the epoch and the loop end at its last step


def test_a_new_iterator_begins_an_epoch_and_model_calls_between_make_an_evaluation(events, loop):
    loop, clock = loop
    for _ in range(2):
        train = object()
        for _ in range(3):
            loop.on_next(train, clock.now, 0.0)
            advance(clock, 0.01)
            loop.train_step(None, eager=False)
        advance(clock, 0.5)  # the loop prints, resets metrics: not a step
        validation = object()
        for _ in range(2):
            began = clock.now
            loop.on_next(validation, began, 0.0)
            advance(clock, 0.002)
            loop.eval_step(began)
        advance(clock, 1.0)  # between epochs (a checkpoint, say)
    loop.close()
    sent = events()
    names = [(e["name"], e["parent"]) for e in sent if e["kind"] == "phase_begin"]
    ids = {e["name"]: e["id"] for e in sent if e["kind"] == "phase_begin"}
    assert [n for n, _ in names] == ["train loop", "epoch 1", "evaluation", "epoch 2", "evaluation"]
    assert names[2][1] == ids["epoch 1"] and names[1][1] == ids["train loop"]
    steps = {}
    for e in sent:
        if e["kind"] == "steps":
            steps.setdefault(e["phase"], []).extend(e["seconds"])
    # Training steps do not include the pause before an evaluation or an epoch: each pass
    # begins at its first next().
    assert sorted(s for p, v in steps.items() for s in v if s > 0.005) == pytest.approx([0.01] * 6)
    assert sorted(s for p, v in steps.items() for s in v if s <= 0.005) == pytest.approx([0.002] * 4)
    begins = {e["id"]: e["t"] for e in sent if e["kind"] == "phase_begin"}
    ends = {e["id"]: e["t"] for e in sent if e["kind"] == "phase_end"}
    first_epoch = [i for i in begins if i == ids["epoch 1"]][0]
    # The epoch ends with its evaluation (as in fit), before the pause between epochs.
    assert ends[first_epoch] == pytest.approx(100.0 + 0.03 + 0.5 + 0.004)
    assert [e for e in sent if e["kind"] == "loop_input"][-1]["eval_steps"] == 4


def test_model_calls_before_any_update_are_not_an_evaluation(events, loop):
    loop, clock = loop
    loop.eval_step(clock.now)  # a prediction in a job that never trains
    loop.close()
    assert events() == []


def phase_events(pid=1):
    def event(t, kind, **data):
        return Event(t=t, pid=pid, kind=kind, data=data)
    return [event(1.0, "phase_begin", id=1, name="import tensorflow", phase_kind="import", parent=None, cpu=0.1),
            event(2.0, "phase_end", id=1, cpu=1.0),
            event(3.0, "phase_begin", id=3, name="evaluate", phase_kind="evaluate", parent=None, cpu=2.0),
            event(3.5, "phase_end", id=3, cpu=2.4),
            event(9.0, "phase_begin", id=4, name="save", phase_kind="save", parent=None, cpu=5.0),
            event(9.5, "phase_end", id=4, cpu=5.3),
            # the loop, recognised at its first step, begun at 2.5
            event(2.5, "phase_begin", id=2, name="train loop", phase_kind="fit", parent=None, cpu=None),
            event(8.0, "phase_end", id=2, cpu=4.8),
            event(8.0, "loop_input", steps=101, epochs=2, eager=False, eval_steps=0, step_seconds_p50=0.05,
                  next_seconds_p50=0.02, step_seconds_total=5.0, next_seconds_total=2.0,
                  next_pairs=[[0.0203, 0.0003]] * 16)]


def test_what_the_job_did_inside_the_loop_is_nested_in_it_and_the_split_is_the_loops():
    events = phase_events()
    phases = build_phases(events, [], end=10.0)
    by_name = {p.name: p for p in phases}
    loop_index = phases.index(by_name["train loop"])
    assert by_name["evaluate"].parent == loop_index  # began inside the loop's span
    assert by_name["save"].parent is None  # after its last step
    assert by_name["train loop"].cpu_seconds == 0.0  # no samples here: its start's CPU was not known
    split = input_split(events, phases)
    assert split["measured_by"] == "next() on the loop's iterator against next() on its first batch cached"
    assert split["input_share"] == pytest.approx(0.4) and split["step_overhead_seconds"] == pytest.approx(0.0003)
    finding = loop_input_bound(events[-1].data, by_name["train loop"], 2.0)
    assert finding.id == "input_bound" and finding.severity == "high"
    assert finding.evidence["input_wait_seconds_per_step"] == pytest.approx(0.02)
    assert "next()" in finding.fix


def loop_event(step: float, pairs: list[list[float]], steps: int = 101) -> dict:
    return {"steps": steps, "step_seconds_total": step * (steps - 1), "next_seconds_total": 0.0, "next_pairs": pairs}


def test_what_next_costs_on_any_iterator_is_step_overhead_not_input():
    loop_phase = Phase("train loop", "fit", 0.0, 5.0)
    # A healthy cached, prefetched loop: 2.6 ms steps, next() 0.27 ms on its iterator as on a cached batch.
    healthy = [[0.00027 + noise, 0.00027] for noise in (0.00002, -0.00001, 0.00003, 0.0, -0.00002, 0.00001)] * 8
    assert loop_input_bound(loop_event(0.0026, healthy), loop_phase, 2.0) is None
    # Waiting 1 ms a step for a slow pipeline beyond that: input.
    slow = [[0.00127 + noise, 0.00027] for noise in (0.00002, -0.00001, 0.00003, 0.0)] * 8
    finding = loop_input_bound(loop_event(0.0036, slow), loop_phase, 2.0)
    assert finding.severity == "high" and finding.evidence["input_wait_seconds_per_step"] == pytest.approx(0.001, abs=2e-5)
    assert "beyond the 0.27 ms next() takes on any iterator" in finding.title
    # Timed after the step, the cached next() pays what the first call after a step pays (0.25 ms here);
    # timed before, the real one does: the two orders together cancel it.
    ordered = [[0.00052, 0.00027, 0], [0.00027, 0.00052, 1]] * 16
    assert loop_input_bound(loop_event(0.0026, ordered), loop_phase, 2.0) is None
    # 7% in the order that favours the real call, nothing in the other: not established.
    mixed = [[0.00047, 0.00027, 1], [0.00025, 0.00027, 0]] * 16
    assert loop_input_bound(loop_event(0.0026, mixed), loop_phase, 2.0) is None
    # Over a pipeline running Python, next() on the cached batch waits for the GIL its threads hold:
    # 12 ms of wall time for 0.3 ms of its thread's CPU. Those waits are input's: the cached call costs its
    # CPU, and timed before the real one, its waits are the loop's wait for the batch (the real call then
    # waits less). Read at wall time, this 40 ms step read 25% one run and within noise the next.
    starved = [[0.0063, 0.0183, 0, 0.0003], [0.0320, 0.0120, 1, 0.0003]] * 5
    finding = loop_input_bound(loop_event(0.040, starved), loop_phase, 2.0)
    assert finding.evidence["input_wait_seconds_per_step"] == pytest.approx(0.02785, abs=1e-6)  # (24.0 + 31.7) / 2 ms
    assert finding.evidence["step_overhead_seconds"] == pytest.approx(0.0003)
    at_wall = [p[:3] for p in starved]  # as recorded before the thread's CPU was: the GIL waits read as overhead
    assert loop_input_bound(loop_event(0.040, at_wall), loop_phase, 2.0) is None
    # No pairs (too few steps, not a tf.data iterator): not measured, no verdict.
    assert loop_input_bound(loop_event(0.0026, []), loop_phase, 2.0) is None
    assert input_split([Event(1.0, 1, "phase_begin", {"id": 1, "name": "train loop", "phase_kind": "fit"}),
                        Event(2.0, 1, "phase_end", {"id": 1}),
                        Event(2.0, 1, "loop_input", loop_event(0.0026, []))],
                       [Phase("train loop", "fit", 1.0, 2.0)])["measured"] is False


def test_the_loop_pairs_next_with_a_cached_batch_and_leaves_its_cost_out_of_the_step(events, loop, monkeypatch):
    loop, clock = loop
    built = []

    thread_cpu = Clock()
    loop.thread_cpu = lambda: thread_cpu.now

    def cached_next(iterator):  # 0.3 ms, of which its thread worked 0.1 ms (waited for the GIL the rest)
        advance(clock, 0.0003)
        advance(thread_cpu, 0.0001)

    monkeypatch.setattr("tensorgauge.hook.train_loop._cached_iterator", lambda dataset, batch: built.append(batch) or "c")
    iterator = object()
    for _ in range(40):
        loop.before_next(cached_next)
        began = clock.now
        advance(clock, 0.002)
        loop.on_next(iterator, began, 0.002)
        loop.after_next("batch", 0.002, cached_next)
        advance(clock, 0.003)
        loop.train_step(None, eager=False)
    loop.close()
    sent = events()
    summary = [e for e in sent if e["kind"] == "loop_input"][-1]
    pairs = summary["next_pairs"]
    assert len(pairs) >= 8
    assert all(p[:2] + p[3:] == pytest.approx([0.002, 0.0003, 0.0001]) for p in pairs)
    assert {p[2] for p in pairs} == {0, 1}  # timed in turn before and after the real next()
    steps = [s for e in sent if e["kind"] == "steps" for s in e["seconds"]]
    assert steps == pytest.approx([0.005] * 40)  # the cached next() calls are the tool's, not the step's
    assert built == ["batch"]  # built once, at the loop's third step
    assert summary["pairs_cost_seconds"] == pytest.approx(0.0003 * (len(pairs) + 1))  # and its first element
