"""The input split of a run's training: how much of a step waits for input, and the compute-only
limit, as measured in the job (see :mod:`tensorgauge.hook.input_window`; on Keras' JAX and
PyTorch backends :mod:`tensorgauge.hook.fit_input`), or why it was not.

Pure: from the run's events and phases. In ``show`` and in the JSON of every run that trains
(``input_split``; null for a run without training).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from typing import Any

from tensorgauge.analyse.epoch_starts import epoch_start_input
from tensorgauge.analyse.input_stages import stage_rows
from tensorgauge.analyse.phases import main_fit, step_digests
from tensorgauge.hook.protocol import (
    AB_DISTURBED_CORES,
    AB_MIN_ROUNDS,
    INPUT_HIGH,
    INPUT_MODERATE,
    ROUND_BATCHES,
    ROUND_SECONDS,
    TRAIN_LOOP,
    WINDOW_START,
    ComputeProbe,
    FitConfig,
    FitInput,
    InputAB,
    InputProbe,
    Kind,
    LoopInput,
    P,
    beyond_disturbance,
    disturbed_round,
    one_line,
    round_share,
    round_share_error,
    rounds_spread,
    share_interval,
    steps_error,
    t_critical,
)
from tensorgauge.model import Event, Phase, payloads
from tensorgauge.steps import StepDigest


def _median(values) -> float | None:
    return round(statistics.median(values), 7) if values else None


def _first(events: list[Event], payload: type[P]) -> P | None:
    return next(iter(payloads(events, payload)), None)


def _per_step(window: InputProbe, key: str) -> float | None:
    """A window total per profiled step."""
    fields: Mapping[str, Any] = window  # ``key``: one of its totals
    total, steps = fields.get(key), len(window.get("step_seconds") or [])
    return round(total / steps, 7) if total is not None and steps else None


# Why the A/B did not run, by the run's ``diagnosis`` setting (None: a run recorded before it was kept).
NOT_RUN = {"off": "diagnosis was off (--no-diagnose)",
           "in-process": "tensorgauge.monitor() and %%tensorgauge do not run the input A/B in the job's own process "
                         "(tensorgauge run -- python train.py does)",
           None: "the input A/B did not run (--no-diagnose, or recorded by tensorgauge.monitor())"}
ON = ("auto", "always")  # the A/B was on: it sent no result for this fit


def _why_not_run(events: list[Event], fit: Phase, diagnosis: str | None, cut: str | None) -> str:
    """Why no A/B measured ``fit``: no Keras fit to run it in, the job ended inside the fit (``cut``: how
    it ended), too few steps, or diagnosis off."""
    on = diagnosis in ON
    if on and _first(events, FitConfig) is None:
        return "the input A/B runs inside Keras' fit; this fit was marked by the job's own code"
    if on and cut and not fit.complete:
        return f"the job {cut} before the input A/B reported"
    if not (fit.steps or 0) > WINDOW_START:
        return (f"the fit ran {fit.steps} steps, fewer than the {WINDOW_START + 1} the A/B waits for" if fit.steps
                else f"no step of the fit was recorded (the A/B waits for {WINDOW_START + 1})")
    return "the input A/B sent no result for this fit" if on else NOT_RUN.get(diagnosis, NOT_RUN[None])


def input_split(events: list[Event], phases: list[Phase], diagnosis: str | None = None,
                digests: list[StepDigest] | None = None, cut: str | None = None) -> dict | None:
    """``{"measured": bool, ...}`` for the run's training, or None when it did not train; ``diagnosis``:
    the run's setting (:attr:`~tensorgauge.model.RunRecord.diagnosis`), and ``cut``, how a run that did not
    complete ended (:meth:`~.ending.Ending.describe`): they say why the A/B did not run.
    With ``epoch_start_input`` where epochs paid for input as they started (:mod:`.epoch_starts`), from the
    run's step ``digests`` (default: those in ``events``), and ``stages`` (or ``stages_why``) where the
    pipeline's stages were timed (:mod:`.input_stages`)."""
    split = _step_split(events, phases, diagnosis, cut)
    fit = main_fit(phases)
    if split is not None and fit is not None and fit.name != TRAIN_LOOP:
        index = phases.index(fit)
        epochs = [p for p in phases if p.kind == "epoch" and p.parent == index]
        nested = [p for p in phases if fit.start <= p.start and p.end <= fit.end + 1e-6 and p is not fit]
        if digests is None:
            digests = list(step_digests(events).values())
        own = [(e.t - a, e.t - b) for e in events if e.kind == Kind.INPUT_AB
               for a, b in e.read(InputAB).get("excursions_before") or []]
        paid = epoch_start_input(fit, epochs, digests, nested, own)
        if paid and paid["epochs"]:
            split["epoch_start_input"] = paid
        epoch_steps = sorted(p.steps for p in epochs if p.steps)
        split.update(stage_rows(events, split.get("compute_only_step_seconds"),
                                epoch_steps[len(epoch_steps) // 2] if epoch_steps else None, fit.steps))
    elif split is not None:  # a custom loop: its dataset's stages, timed as the job exited
        split.update(stage_rows(events))
    return split


def _step_split(events: list[Event], phases: list[Phase], diagnosis: str | None, cut: str | None) -> dict | None:
    """The input's share of a training step (see :func:`input_split`)."""
    fit = main_fit(phases)
    if fit is None:
        return None
    loop = _first(events[::-1], LoopInput)  # the latest sums
    if loop is not None and fit.name == TRAIN_LOOP:
        return _loop_split(loop)
    timed = fit_input(events, fit)
    if timed is not None:
        return _backend_split(timed, fit)
    # The A/B that measured (a short warm-up fit may have skipped it, and a later fit measured it); else
    # why the last fit that tried (the longest) did not.
    tried = payloads(events, InputAB)
    measured = [d for d in tried if d.get("real_step_seconds")]
    in_rounds = [d for d in measured if not d.get("after_fit")]  # preferred to a short fit's steps after it
    ab, where = measured_ab(in_rounds) if in_rounds else (measured[0] if measured else tried[-1] if tried else None, "")
    window = _first(events, InputProbe)
    if ab is None:
        if window is not None and window.get("step_seconds"):  # a run recorded before the A/B
            return _window_split(window, _first(events, ComputeProbe))
        return {"measured": False, "why": _why_not_run(events, fit, diagnosis, cut)}
    if ab.get("skipped") or ab.get("error"):
        why = ab.get("skipped") or f"the A/B failed: {one_line(str(ab['error']))}"
        return {"measured": False, "why": why, "allowance_seconds": ab.get("allowance_seconds")}
    verdict = ab_verdict(ab)
    how = (f"A/B: the fit's steps in {verdict['rounds']} blocks against as many compute-only steps run as it ended"
           if ab.get("after_fit") else f"A/B: {verdict['rounds']} rounds of real and compute-only steps")
    if where:
        verdict["ab_fits"] = len(in_rounds)
        how += where
    split: dict = {"measured": True, "measured_by": f"{how} on {ab.get('source') or 'one cached batch'}", **verdict,
                   "profiled_wait_seconds": None, "input_threads_busy_seconds": None,
                   "cost_seconds": ab.get("cost_seconds"), "allowance_seconds": ab.get("allowance_seconds")}
    if window is not None and window.get("step_seconds"):
        split["profiled_wait_seconds"] = _median(window.get("get_next_seconds"))
        split["input_threads_busy_seconds"] = _per_step(window, "input_thread_seconds")
        split["cost_seconds"] = round((split["cost_seconds"] or 0.0) + (window.get("start_seconds") or 0.0)
                                      + (window.get("stop_seconds") or 0.0), 4)
    elif window is not None:
        split["profiler"] = "not run: " + str(window.get("skipped") or window.get("error"))
    return split


def measured_ab(in_rounds: list[InputAB]) -> tuple[InputAB, str]:
    """(the A/B a verdict stands on, where it was measured: "" for one fit's) of those that measured in rounds:
    one, or where the rounds of a fit left the verdict open and later fits measured again
    (:mod:`tensorgauge.hook.input_window`), the first that establishes a cost, else every fit's rounds pooled
    as one A/B's, whose interval they narrow. What they cost is theirs together."""
    if len(in_rounds) == 1:
        return in_rounds[0], ""
    cost = round(sum(d.get("cost_seconds") or 0.0 for d in in_rounds), 4)
    allowed = [d.get("allowance_seconds") for d in in_rounds]
    together: dict = {"cost_seconds": cost,
                      "allowance_seconds": None if None in allowed else round(sum(allowed), 4)}  # type: ignore[arg-type]
    # Each fit that measured again looked at the rounds once more (as each round begun in doubt does).
    found = next((d for i, d in enumerate(in_rounds) if ab_verdict(_looked_after(d, in_rounds[:i]))["established"]),
                 None)
    if found is not None:
        index = in_rounds.index(found)
        where = f" in fit {index + 1} of the {len(in_rounds)} that measured"
        return {**_looked_after(found, in_rounds[:index]), **together}, where
    # The pool is a look of its own, after each fit's.
    pooled: dict = {**in_rounds[0], **together, "doubt_rounds": _looks(in_rounds), "real_step_seconds": [],
                    "compute_step_seconds": [], "other_cores": [], "excursions_before": [], "untimed_steps": None}
    for d in in_rounds:
        real = d.get("real_step_seconds") or []
        loads = list(d.get("other_cores") or [])
        pooled["real_step_seconds"] += real
        pooled["compute_step_seconds"] += d.get("compute_step_seconds") or []
        pooled["other_cores"] += loads[:len(real)] + [None] * (len(real) - len(loads))
        untimed = d.get("untimed_steps")
        if untimed:
            seconds, steps = pooled["untimed_steps"] or [0.0, 0]
            pooled["untimed_steps"] = [seconds + untimed[0], steps + untimed[1]]
    return pooled, f" over the {len(in_rounds)} fits that measured"  # type: ignore[return-value]


# Rounds among which one that disagrees is outvoted for three times the threshold (of four, three agreed on
# 17% where the same healthy job's other runs and an independent A/B found 0-3.5%); a majority of four or
# more outvotes the rest for four times it (in CI: a competing map's 37% cost, rounds of 20, 3, 32 and 45%).
OUTVOTING_ROUNDS, MAJORITY_ROUNDS = 5, 4
# Rounds that all agree clear their bar by this many standard errors of their mean, read from their own
# steps' scatter (one-sided 95%): on a quiet machine the healthy demo's rounds (bare A/B 0-3.5%) are good to
# 2-8 points each, and three that happen to fall at 9-14% pooled 12% in 0.6% of A/Bs drawn from 240 of them.
AGREEMENT_Z = 1.645
MAJORITY = 0.6  # of the rounds, for a pooled share of four times the threshold


def _looks(fits: list[InputAB]) -> int:
    """The looks the fits' A/Bs took at their rounds: one each, and one for each round begun in doubt."""
    return sum(1 + (d.get("doubt_rounds") or 0) for d in fits)


def _looked_after(ab: InputAB, before: list[InputAB]) -> InputAB:
    """``ab`` with the looks at rounds of the fits ``before`` it counted in its ``doubt_rounds``."""
    looks = _looks(before)
    return {**ab, "doubt_rounds": (ab.get("doubt_rounds") or 0) + looks} if looks else ab


def ab_verdict(ab: InputAB) -> dict:
    """What the A/B's rounds say (:func:`_rounds_verdict`), its disturbed rounds left out; where that
    establishes no cost, with those of them whose disturbance cannot explain their share
    (:func:`~tensorgauge.hook.protocol.beyond_disturbance`) counted too, if they establish one. They count only
    for a cost: a neighbour that slowed a round's compute-only steps hides input, never shows it."""
    verdict = _rounds_verdict(ab, keep_disturbed=False)
    if verdict["established"] or not verdict["disturbed_rounds"]:
        return verdict
    kept = _rounds_verdict(ab, keep_disturbed=True)
    return kept if kept["established"] else verdict


def _rounds_verdict(ab: InputAB, keep_disturbed: bool) -> dict:
    """What the A/B's rounds say: the real and compute-only step (:func:`_pooled`), input's share of the step, the lowest and highest share of any round, the cores other processes kept busy meanwhile, and whether the cost is established:
    at least :data:`INPUT_MODERATE` of the step, and the rounds bear that out. Either their mean share
    is above it by Student's t at 97.5% over the looks taken at them (:func:`~tensorgauge.hook.protocol.t_critical`:
    one, and one more for each round begun in doubt and each earlier fit that measured, ``doubt_rounds``), or the
    share pooled over the rounds at least that, less the
    one that shows the most, is twice it with every round at least that (four times beside other work:
    a round disturbed, or the neighbours' mean at :data:`AB_DISTURBED_CORES`), three times it with all but
    one (of :data:`OUTVOTING_ROUNDS` or more, those clear of it by t), or four times it with most of
    them (of :data:`MAJORITY_ROUNDS` or more). One round lost to an epoch's end does not hide a cost
    the others all show; a pooled figure the rounds do not bear out is "within noise", never a
    finding that flips from run to run."""
    real, compute = ab.get("real_step_seconds") or [], ab.get("compute_step_seconds") or []
    loads: list[list[float | None] | None] = list(ab.get("other_cores") or [])
    loads += [None] * (len(real) - len(loads))
    cpus = ab.get("machine_cpus")
    looks = 1 + (ab.get("doubt_rounds") or 0)
    every = [(r, c, load) for r, c, load in zip(real, compute, loads) if r and c]
    kept_at = {i for i, (r, c, load) in enumerate(every)
               if keep_disturbed and disturbed_round(load) and beyond_disturbance(r, c, load, cpus)}
    kept = [(r, c) for i, (r, c, _) in enumerate(every) if i in kept_at]
    rounds = [round_ for i, round_ in enumerate(every) if i not in kept_at]
    disturbed = sum(1 for _, _, load in rounds if disturbed_round(load))
    pairs = kept + [(r, c) for r, c, load in rounds if not disturbed_round(load)]
    step, limit = _pooled(pairs)
    shares = [round_share(r, c) for r, c in pairs]
    errors = [round_share_error(r, c) for r, c in pairs]
    share = max(0.0, 1 - limit / step) if step > 0 else 0.0
    # No single round carries a verdict: the healthy demo (bare A/B 0-3.5%) once pooled 11.6% from rounds
    # of 32, 6, 13 and 9%, and in CI 19% from 17, 22, 17 and 1%. Outvoted rounds: keras-io's weather
    # forecaster had four of 30-45% and one of -1%; a serial Python map's 31% cost, two rounds whose
    # compute-only steps ran 2x slow beside it. Consistent rounds are left to the t-test, for a share of
    # twice the threshold or more: the rounds of one run share its speed of the moment, so the test clears
    # what the next run would not (TensorFlow's classification tutorial under tf_keras, 1.3 ms steps, a bare
    # A/B of -1 to +4%: rounds of 6-11% pooled 8% in 1 run of 5, the others 0-10% within noise).
    # Beside other work (a round disturbed, or the rounds' neighbours kept AB_DISTURBED_CORES busy on average),
    # rounds that all agree need a pooled share of four times the threshold, as a majority does: a neighbour's
    # bursts scatter the rounds (the healthy demo beside another test process: 90% of 475 undisturbed rounds
    # within -16 to +16%, a standard deviation of 10 points), and three that lean the same way are no
    # evidence (in CI, rounds of about 9, 12 and 22% as the neighbour left mid-fit, its steps from 20 to
    # 12 ms: "input costs 12%").
    others = [x for _, _, load in rounds if not disturbed_round(load) for x in (load or []) if x is not None]
    busy = bool(others) and statistics.mean(others) >= AB_DISTURBED_CORES
    beside_work = busy or disturbed > 0 or bool(kept)
    agreeing = [(pair, x, error) for pair, x, error in zip(pairs, shares, errors) if x >= INPUT_MODERATE]
    above = len(agreeing)
    robust = _pooled_share(_without_most([pair for pair, _, _ in agreeing], [x for _, x, _ in agreeing]))
    agree = (above == len(shares) and robust >= (4 if beside_work else 2) * INPUT_MODERATE + _steps_margin(errors)) or \
        (len(shares) >= OUTVOTING_ROUNDS and above >= len(shares) - 1 and robust >= 3 * INPUT_MODERATE
         and _clear_of([x for _, x, _ in agreeing], INPUT_MODERATE, [e for _, _, e in agreeing], looks)) or \
        (len(shares) >= MAJORITY_ROUNDS and above >= math.ceil(MAJORITY * len(shares))
         and robust >= 4 * INPUT_MODERATE)
    by_t = _clear_of(shares, INPUT_MODERATE, errors, looks) and share >= 2 * INPUT_MODERATE
    # Rounds whose neighbours came or went between their real and compute-only steps are left out; a verdict
    # needs AB_MIN_ROUNDS of the others where any was.
    established = bool(shares) and share >= INPUT_MODERATE and (agree or by_t) and \
        (not disturbed or len(pairs) >= AB_MIN_ROUNDS)
    spanned = None if established or beside_work else _over_the_span(ab, pairs, shares)
    if spanned is not None:
        established, (step, limit) = True, spanned
        share = 1 - limit / step
    # The interval is over the rounds the verdict stands on: those that agree where they outvoted the rest.
    counted = (shares, errors) if by_t or not established else \
        ([x for _, x, _ in agreeing], [e for _, _, e in agreeing])
    low, high = share_interval(*counted, looks=looks)
    if spanned is not None:
        verdict = "input costs the steps, over all the fit's steps the A/B spanned (its rounds disagreed)"
    elif established:
        verdict = "input costs the steps"
    elif disturbed and len(pairs) < AB_MIN_ROUNDS:
        verdict = (f"within noise: other processes' load changed between the real and the compute-only steps of "
                   f"{disturbed} of {len(rounds)} rounds")
    elif share >= INPUT_MODERATE or high >= INPUT_MODERATE:
        # An interval that straddles the threshold is within noise of it, not "no cost" (a run of the same
        # job that pools just over it would not say "no cost" either).
        verdict = f"within noise: the rounds' interval straddles {INPUT_MODERATE:.0%}"
    else:
        verdict = f"no input cost above {INPUT_MODERATE:.0%} of the step"
    return {"rounds": len(pairs), "disturbed_rounds": disturbed, "disturbed_rounds_kept": len(kept),
            "steps": sum(len(r) for r, _ in pairs),
            "other_cores_mean": round(statistics.mean(others), 3) if others else None,
            "step_seconds": round(step, 7), "compute_only_step_seconds": round(limit, 7),
            "input_wait_seconds": round(max(0.0, step - limit), 7), "input_share": round(share, 4),
            "input_share_low": round(min(shares), 4) if shares else None,
            "input_share_high": round(max(shares), 4) if shares else None,
            "input_share_interval": [round(low, 4), round(high, 4)] if shares else None,
            "outvoted_rounds": len(shares) - len(counted[0]), "spanned": spanned is not None,
            "established": established, "verdict": verdict}


def _over_the_span(ab: InputAB, pairs: list, shares: list[float]) -> tuple[float, float] | None:
    """(the real step, the compute-only step) over every step of the fit the A/B spanned, its untimed
    ones (``untimed_steps``) with its rounds', where the rounds disagree on a cost all of them bear out:
    a round at :data:`INPUT_HIGH` or more, the rounds' real steps' mean that much above their
    compute-only steps' mean, and the span's mean step that much above the compute-only median. A
    pipeline's speed may swing within a fit (keras-io's wide-and-deep program, input 52-75% of its
    training: rounds of 0, 73 and -2%, real steps of 1.8, 8.4 and 1.7 ms against 1.8-2.3 ms compute-only);
    the median of the rounds then reads the swing, the span the fit. None otherwise, and not tried beside
    other work (the caller's to say): a neighbour's bursts slow the span's steps as input would (the healthy
    demo beside another test's jobs: rounds of -62, 55, -28 and 37%, "input costs 36%" over the span)."""
    untimed = ab.get("untimed_steps")
    if not untimed or not untimed[1] or len(shares) < AB_MIN_ROUNDS or max(shares) < INPUT_HIGH:
        return None
    real = [t for r, _ in pairs for t in r]
    compute = [t for _, c in pairs for t in c]
    if 1 - statistics.mean(compute) / statistics.mean(real) < INPUT_HIGH:
        return None
    step, limit = (untimed[0] + sum(real)) / (untimed[1] + len(real)), statistics.median(compute)
    return (step, limit) if 1 - limit / step >= INPUT_HIGH else None


def _pooled(pairs: list) -> tuple[float, float]:
    """The real and the compute-only step over ``pairs`` of rounds: the real steps' mean over every round,
    and the compute-only step that the rounds' median share (:func:`~tensorgauge.hook.protocol.round_share`) leaves of it.

    Each round pairs its real steps with compute-only steps taken beside them, so input's share is read
    within each round and the rounds' median taken: steps pooled across rounds that ran at different
    speeds fell below every round (keras-io mixup: rounds of 14-32% pooled to 11%)."""
    if not pairs:
        return 0.0, 0.0
    step = statistics.mean(t for r, _ in pairs for t in r)
    share = statistics.median(round_share(r, c) for r, c in pairs)
    return step, step * (1 - share)


def _pooled_share(pairs: list) -> float:
    """Input's share of the step, pooled over ``pairs`` of rounds: 1 - compute-only / real."""
    step, limit = _pooled(pairs)
    return max(0.0, 1 - limit / step) if step > 0 else 0.0


def _without_most(pairs: list, shares: list[float]) -> list:
    """``pairs`` less the round with the largest share, where three or more rounds leave two to pool."""
    if len(pairs) < 3:
        return pairs
    most = shares.index(max(shares))
    return [p for i, p in enumerate(pairs) if i != most]


def _steps_margin(errors: list[float]) -> float:
    """:data:`AGREEMENT_Z` standard errors of the rounds' mean share, as their steps' ``errors`` alone put it
    (:func:`~tensorgauge.hook.protocol.round_share_error`)."""
    return AGREEMENT_Z * steps_error(errors) / len(errors) ** 0.5 if errors else 0.0


def _clear_of(shares: list[float], threshold: float, errors: list[float] | None = None, looks: int = 1) -> bool:
    """The rounds' mean share is above ``threshold`` by Student's t at 97.5% (one-sided) over ``looks``
    (:func:`~tensorgauge.hook.protocol.t_critical`), their spread never read below their own steps' ``errors``
    (:func:`~tensorgauge.hook.protocol.rounds_spread`)."""
    if len(shares) < 3:
        return False
    spread = rounds_spread(shares, errors)
    excess = statistics.mean(shares) - threshold
    return spread > 0 and excess / (spread / len(shares) ** 0.5) >= t_critical(len(shares) - 1, looks)


def _window_split(window: InputProbe, probe: ComputeProbe | None) -> dict:
    """A run recorded before the A/B: its profiler window and compute-only probe."""
    step, wait = _median(window.get("step_seconds")), _median(window.get("get_next_seconds"))
    split: dict = {"measured": True, "measured_by": "profiler window", "steps": len(window.get("step_seconds") or []),
                   "step_seconds": step, "input_wait_seconds": wait,
                   "input_share": round(min(wait, step) / step, 4) if step and wait is not None else None,
                   "input_threads_busy_seconds": _per_step(window, "input_thread_seconds"),
                   "compute_only_step_seconds": None,
                   "cost_seconds": round((window.get("start_seconds") or 0.0) + (window.get("stop_seconds") or 0.0), 4),
                   "allowance_seconds": window.get("allowance_seconds")}
    if probe is not None and probe.get("step_seconds"):
        split["compute_only_step_seconds"] = _median(probe["step_seconds"])
        split["cost_seconds"] = round(split["cost_seconds"] + (probe.get("total_seconds") or 0.0), 4)
    return split


def fit_input(events: list[Event], fit: Phase) -> FitInput | None:
    """The ``fit_input`` event of ``fit`` (a fit on Keras' JAX or PyTorch backend), if any."""
    return next((timed for e in events if e.kind == Kind.FIT_INPUT and fit.start - 1e-6 <= e.t <= fit.end + 1e-6
                 and ((timed := e.read(FitInput)).get("batches") or 0) >= 2), None)


def backend_input_wait(timed: FitInput, fit: Phase) -> float:
    """Seconds a step of ``fit`` waited in Keras' data iterator: the batches after the first (which
    starts the iterator; Keras' build of the model reads it), as many per step as the fit took."""
    later = timed["batches"] - 1
    per_batch = max(0.0, timed["seconds"] - (timed.get("first_seconds") or 0.0)) / later
    return per_batch * max(1, round(later / max(1, fit.steps or later)))


def rounds_verdict(rounds: list[list[float]]) -> dict | None:
    """The share of its time a fit's training thread spent in ``next()``, from rounds of consecutive
    batches (``[wait, span, batches]``), with its 95% interval over the rounds (Student's t): established
    where the whole interval is at :data:`INPUT_MODERATE` or more, "within noise" where it straddles it
    (a healthy JAX fit read 5.3% from one figure in 2 runs of 2). None with fewer than 3 rounds."""
    usable = [r for r in rounds if len(r) >= 2 and r[1] > 0]
    if len(usable) < 3:
        return None
    shares = [min(1.0, r[0] / r[1]) for r in usable]
    share = min(1.0, sum(r[0] for r in usable) / sum(r[1] for r in usable))
    low, high = share_interval(shares)
    low, high = max(0.0, share - (high - low) / 2), min(1.0, share + (high - low) / 2)
    established = low >= INPUT_MODERATE
    verdict = ("input costs the steps" if established else
               "within noise: the rounds' interval straddles the threshold" if high >= INPUT_MODERATE else
               f"no input cost above {INPUT_MODERATE:.0%} of the step")
    return {"rounds": len(shares), "input_share": round(share, 4), "input_share_low": round(low, 4),
            "input_share_high": round(high, 4), "input_share_interval": [round(low, 4), round(high, 4)],
            "established": established, "verdict": verdict}


def _backend_split(timed: FitInput, fit: Phase) -> dict:
    step, wait = fit.step_seconds_p50, round(backend_input_wait(timed, fit), 7)
    split = {"measured": True, "measured_by": f"next() on Keras' data iterator ({timed.get('backend')} backend)",
             "steps": fit.steps, "step_seconds": step, "input_wait_seconds": wait,
             "input_share": round(min(wait, step) / step, 4) if step else None,
             "input_work_seconds": None, "input_threads_busy_seconds": None, "compute_only_step_seconds": None,
             "compute_probe": None, "cost_seconds": 0.0, "allowance_seconds": None}
    by_round = rounds_verdict(timed.get("rounds") or [])
    if by_round is not None:
        split.update(by_round)
        if step:
            split["input_wait_seconds"] = round(step * by_round["input_share"], 7)
    elif "rounds" in timed:
        # Its mean wait against the median step is no verdict: a JAX fit of 64 steps of 0.25 ms beside another
        # process waited 0.37 ms a batch on average, "100% of each step".
        split["verdict"] = (f"no verdict: the fit was too short for {AB_MIN_ROUNDS} rounds of "
                            f"{ROUND_BATCHES} batches and {ROUND_SECONDS} s")
    if timed.get("epoch_start_seconds") is not None:
        split["epoch_start_input_seconds"] = timed["epoch_start_seconds"]
    return split


def loop_verdict(loop: LoopInput | None) -> dict | None:
    """A custom loop's input cost from its ``next()`` calls paired with ``next()`` on its first batch
    cached (the dispatch any iterator costs: step overhead, not input; see :func:`_as_timed`), timed in
    turn just before and just after the real one: each order is off by what the first call after a step
    pays, the mean of their medians is not. Established where the share's 95% interval over the pairs is at
    :data:`INPUT_MODERATE` of the step or more, with the real call slower even in the order that favours the
    cached one (timed after the step, before the real one); a median at the threshold with an interval that
    straddles it is "within noise" (a healthy JAX loop beside another TensorFlow job: 5% once, 0.4-0.5% on a
    quiet machine). None for a loop with no pairs (not measured)."""
    if not loop or (loop.get("steps") or 0) < 2 or not loop.get("step_seconds_total"):
        return None
    pairs = [p for p in loop.get("next_pairs") or [] if len(p) >= 2]
    if not pairs:
        return None
    step = loop["step_seconds_total"] / (loop["steps"] - 1)  # the first step (tracing) is left out of the totals
    pairs = [_as_timed(p) for p in pairs]
    by_order = [[real - cached for real, cached, order in pairs if order == k] for k in (0, 1)]
    medians = [statistics.median(extra) for extra in by_order if extra]
    lost = min(step, max(0.0, statistics.mean(medians)))
    share = lost / step if step > 0 else 0.0
    low, high = share_interval([(real - cached) / step for real, cached, *_ in pairs]) if step > 0 else (0.0, 0.0)
    half = (high - low) / 2
    low, high = max(0.0, share - half), min(1.0, share + half)
    established = low >= INPUT_MODERATE and bool(by_order[0]) and statistics.median(by_order[0]) > 0
    return {"step_seconds": round(step, 7), "input_wait_seconds": round(lost, 7), "input_share": round(share, 4),
            "input_share_interval": [round(low, 4), round(high, 4)],
            "step_overhead_seconds": round(statistics.median(p[1] for p in pairs), 7), "pairs": len(pairs),
            "pairs_slower": sum(1 for p in pairs if p[0] > p[1]), "established": established,
            "verdict": ("input costs the steps" if established else "within noise: next() on the loop's iterator is "
                        "not reliably slower than on a cached batch" if max(share, high) >= INPUT_MODERATE else
                        f"no input cost above {INPUT_MODERATE:.0%} of the step"),
            "measured_by": "next() on the loop's iterator against next() on its first batch cached"}


def _as_timed(pair: list[float]) -> list[float]:
    """``[real, cached, order]`` of a recorded pair, the cached ``next()`` at its thread's CPU seconds where
    recorded: its wall time includes waits for the GIL held by a pipeline running Python (cached calls read
    5-44 ms wall, 0.3 ms CPU, over a serial ``py_function`` map), input's cost, not the call's. Timed before
    the real one, those waits are the loop's wait for its batch too (the pipeline worked meanwhile, so
    the real call waited less): they count with it."""
    real, wall, order = pair[0], pair[1], pair[2] if len(pair) > 2 else 0
    if len(pair) < 4:
        return [real, wall, order]
    cpu = min(wall, pair[3])
    return [real + (wall - cpu if order == 0 else 0.0), cpu, order]


def _loop_split(loop: LoopInput) -> dict:
    """A custom training loop's input wait: its ``next()`` calls against the cached batch's (see
    :func:`loop_verdict`), or, where none were paired, not measured."""
    verdict = loop_verdict(loop)
    by_round = rounds_verdict(loop.get("next_rounds") or []) if verdict is None else None
    if by_round is not None:  # a DataLoader (no tf.data iterator to pair with a cached batch): its waits by round
        step = loop.get("step_seconds_p50")
        return {"measured": True, "steps": loop.get("steps"), "step_seconds": step,
                "input_wait_seconds": round(step * by_round["input_share"], 7) if step else None,
                "compute_only_step_seconds": None, "cost_seconds": 0.0, "allowance_seconds": None,
                "measured_by": "next() on the loop's iterator, timed every step, by round", **by_round}
    if verdict is None:
        why = ("the loop's next() calls were not paired with next() on a cached batch (too few steps, or not a "
               "tf.data iterator: a PyTorch DataLoader's wait is timed, not paired)")
        step, wait = loop.get("step_seconds_p50"), loop.get("next_seconds_p50")
        if step and wait is not None:
            why += (f"; its next() took {wait / step:.0%} of the step ({wait * 1000:.2f} ms of {step * 1000:.2f} ms), "
                    "its own dispatch not told apart")
        return {"measured": False, "why": why}
    return {"measured": True, "steps": loop.get("steps"), "compute_only_step_seconds": None,
            "cost_seconds": loop.get("pairs_cost_seconds"), "allowance_seconds": None, **verdict}


def describe(split: dict | None) -> str | None:
    """One line for ``show``."""
    if split is None:
        return None
    if not split.get("measured"):
        return f"not measured: {split.get('why')}" + _epoch_starts_text(split)
    step, wait = split.get("step_seconds"), split.get("input_wait_seconds")
    if step is None or wait is None:
        return "measured, but no step was timed"
    if split.get("rounds") or split.get("pairs"):
        spread = ""
        interval = split.get("input_share_interval")
        if interval:
            outvoted = split.get("outvoted_rounds") or 0
            over = (f"{split['rounds'] - outvoted} rounds" if split.get("rounds") else f"{split['pairs']} pairs")
            disturbed = split.get("disturbed_rounds") or 0
            spread = (f", {max(0.0, interval[0]):.0%} to {interval[1]:.0%} at 95% over {over}"
                      + (f", {outvoted} outvoted" if outvoted else "")
                      + (f", {disturbed} left out (other processes' load changed in them)" if disturbed else ""))
        elif split.get("input_share_low") is not None:
            spread = f", {split['input_share_low']:.0%} to {split['input_share_high']:.0%} by round"
        text = (f"input costs {split['input_share']:.0%} of each step ({wait * 1000:.2f} ms of {step * 1000:.2f} ms"
                f"{spread}; {split['verdict']}; by {split['measured_by']})")
        if split.get("compute_only_step_seconds") is not None:
            text += f"; compute-only {split['compute_only_step_seconds'] * 1000:.2f} ms a step"
        if split.get("profiled_wait_seconds") is not None:
            text += f"; profiled wait in IteratorGetNext {split['profiled_wait_seconds'] * 1000:.2f} ms a step"
    else:
        text = (f"waits {split['input_share']:.0%} of each step ({wait * 1000:.1f} ms of {step * 1000:.1f} ms, "
                f"{split['steps']} steps, by {split['measured_by']})")
        if split.get("verdict"):
            text += f"; {split['verdict']}"
        if split.get("compute_only_step_seconds") is not None:
            text += f"; compute-only {split['compute_only_step_seconds'] * 1000:.1f} ms a step"
    if split.get("input_threads_busy_seconds"):
        text += f"; tf.data threads busy {split['input_threads_busy_seconds'] * 1000:.1f} ms a step"
    if split.get("step_overhead_seconds"):
        text += f"; next() itself {split['step_overhead_seconds'] * 1000:.2f} ms a step (step overhead, not input)"
    if split.get("cost_seconds"):
        text += f"; cost {split['cost_seconds']:.2f} s"
    return text + _epoch_starts_text(split)


def _epoch_starts_text(split: dict) -> str:
    paid = split.get("epoch_start_input")
    if not paid:
        return ""
    return (f"; at epoch starts {paid['seconds']:.2f} s before their first steps ({paid['share']:.0%} of training, "
            f"{paid['epochs']} epochs)")
