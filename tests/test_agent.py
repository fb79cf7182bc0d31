import pytest

from tensorgauge.hook.agent import Agent


def test_nesting_parents_and_closing_inner_phases(events):
    agent = Agent()
    outer = agent.begin("fit", "fit")
    inner = agent.begin("epoch 1", "epoch")
    agent.end(outer)  # closes the epoch too
    kinds = [(e["kind"], e.get("id"), e.get("parent")) for e in events()]
    assert kinds == [("phase_begin", outer, None), ("phase_begin", inner, outer),
                     ("phase_end", inner, None), ("phase_end", outer, None)]
    agent.end(outer)  # already closed: nothing happens
    assert events() == []


def test_automatic_phase_inside_its_own_kind_is_not_repeated(events):
    agent = Agent()
    outer = agent.begin("save model.keras", "save", auto=True)
    assert agent.begin("save_model model.keras", "save", auto=True) is None
    user = agent.begin("my save", "save", auto=False)
    assert user is not None
    agent.end(outer)
    assert [e["kind"] for e in events()] == ["phase_begin", "phase_begin", "phase_end", "phase_end"]


def test_begin_marked_steps_close_at_next_begin_child_and_end(events):
    clock = iter([0.0, 1.0, 1.5, 2.5, 3.0, 3.0, 4.0, 4.0, 4.0])
    agent = Agent(clock=lambda: next(clock))
    epoch = agent.begin("epoch 1", "epoch")  # t=0 (begin) ; channel uses its own clock
    agent.step_begin()  # 1.0
    agent.step_begin()  # 1.5 -> step of 0.5
    child = agent.begin("validation", "evaluate")  # 2.5 -> step of 1.0
    agent.end(child)  # 3.0
    agent.end(epoch)  # 4.0 (no pending step)
    steps = [e for e in events() if e["kind"] == "steps"]
    assert {e["phase"] for e in steps} == {epoch}
    assert [x for e in steps for x in e["seconds"]] == [0.5, 1.0]
    assert [x for e in steps for x in e["ends"]] == [1.5, 2.5]


def test_end_marked_steps_measure_from_the_previous_mark(events):
    clock = iter([10.0, 10.2, 10.5, 11.0, 11.0, 11.0])
    agent = Agent(clock=lambda: next(clock))
    loop = agent.begin("train loop")
    agent.step_end()
    agent.step_end()
    agent.end(loop)
    steps = [e for e in events() if e["kind"] == "steps"]
    assert steps[0]["seconds"] == [pytest.approx(0.2), pytest.approx(0.3)]


def test_steps_outside_a_phase_and_errors_are_recorded(events):
    agent = Agent()
    agent.step_end()  # nothing open: ignored
    agent.step_begin()
    phase = agent.begin("p")
    agent.end(phase, ValueError("boom"))
    ends = [e for e in events() if e["kind"] == "phase_end"]
    assert ends[0]["error"] == "ValueError"
