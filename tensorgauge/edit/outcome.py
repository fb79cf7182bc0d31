"""What a verified fix did: the training time and step time of the program's reruns before and after it,
whether its finding is gone, and whether the training is unchanged (each fit's per-epoch losses, the runs
seeded alike). Pure: the reruns are made by the ``fix`` command."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from tensorgauge.edit.plan import Edit, Numbers
from tensorgauge.model import Finding, Phase

# Losses that must be equal may differ by float round-off of threaded kernels; "close" ones by this much.
LOSS_TOLERANCE: dict[Numbers, float] = {"equal": 1e-5, "close": 0.02}
PAYS = 1.05  # a fix pays when the training is at least this much faster (median of the pairs)


@dataclass
class Rerun:
    """One rerun of the program, as the fix's judgement reads it."""

    run_id: str
    training_seconds: float | None  # the fits' (or the train loop's) wall time together
    step_seconds: float | None  # the main fit's median step
    findings: list[Finding]
    losses: list[list[float]]  # each fit's per-epoch losses
    exit_code: int | None
    rss_peak_bytes: int | None = None


def training(phases: list[Phase]) -> tuple[float | None, float | None]:
    """(the top-level fits' wall seconds together, the longest fit's median step)."""
    fits = [p for p in phases if p.kind == "fit" and p.parent is None] or [p for p in phases if p.kind == "fit"]
    if not fits:
        return None, None
    longest = max(fits, key=lambda p: p.end - p.start)
    return sum(p.end - p.start for p in fits), longest.step_seconds_p50


@dataclass
class Verified:
    edit: Edit
    before: dict = field(default_factory=dict)
    after: dict = field(default_factory=dict)
    gain: float | None = None  # before's training time / after's (median over the pairs)
    finding_gone: bool | None = None
    training_unchanged: bool | None = None
    training_why: str = ""
    pays: bool = False
    why: str = ""  # why it was left out (does not pay, changes the training, the rerun failed)
    runs: list[str] = field(default_factory=list)  # the reruns' ids, before and after

    def to_dict(self) -> dict:
        return {"before": self.before, "after": self.after, "gain": None if self.gain is None else round(self.gain, 3),
                "finding_gone": self.finding_gone, "training_unchanged": self.training_unchanged,
                "training_why": self.training_why, "pays": self.pays, "why": self.why, "runs": self.runs}


def _median(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _side(reruns: list[Rerun], steps_per_call: int = 1) -> dict:
    """Medians of the reruns; a step is one training step (a call of N steps counted as N)."""
    step = _median([r.step_seconds for r in reruns])
    return {"training_seconds": _round(_median([r.training_seconds for r in reruns])),
            "step_seconds_p50": _round(step / steps_per_call if step is not None else None, 6),
            "runs": len(reruns)}


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def compare_losses(before: list[list[float]], after: list[list[float]], numbers: Numbers) -> tuple[bool | None, str]:
    """(training unchanged, why): the fits' per-epoch losses compared within the edit's tolerance."""
    if not before or not after:
        return None, "not compared: the fits' losses were not recorded (a custom loop's are not visible)"
    pairs = [(a, b) for fa, fb in zip(before, after) for a, b in zip(fa, fb)]
    if not pairs or len(before[0]) != len(after[0]):
        return False, f"the fits ran a different number of epochs ({len(before[0])} against {len(after[0])})"
    tolerance = LOSS_TOLERANCE.get(numbers, 0.0)
    worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in pairs)
    said = "equal" if numbers == "equal" else "within"
    if worst <= tolerance:
        return True, f"{len(pairs)} epoch losses {said} (largest difference {worst:.1e}, tolerance {tolerance:.0e})"
    return False, (f"the losses differ by up to {worst:.1%} (tolerance {tolerance:.0e}): "
                   + ("this fix must not change them" if numbers == "equal" else "more than round-off"))


def _seconds(reruns: list[Rerun]) -> list[float]:
    return [r.training_seconds for r in reruns if r.training_seconds is not None]


def _apart(before: list[Rerun], after: list[Rerun]) -> bool:
    """More than half of the pairs faster with the fix: the pairs, interleaved, share the machine's mood, and
    one pair a neighbour slowed does not decide (nor does a median the other pairs do not bear out)."""
    pairs = [(b.training_seconds, a.training_seconds) for b, a in zip(before, after)
             if b.training_seconds and a.training_seconds]
    return 2 * sum(a < b for b, a in pairs) > len(pairs)


def _span(reruns: list[Rerun]) -> str:
    times = _seconds(reruns)
    return f"{min(times):.2f}-{max(times):.2f} s" if times else "-"


def judge(edit: Edit, before: list[Rerun], after: list[Rerun]) -> Verified:
    """The fix's outcome over paired reruns (the same count before and after, interleaved)."""
    verified = Verified(edit, _side(before), _side(after, edit.steps_per_call), runs=[r.run_id for r in before + after])
    failed = [r for r in before + after if r.exit_code not in (0, None)]
    if failed:
        verified.why = f"a rerun failed (run {failed[0].run_id}, exit {failed[0].exit_code})"
        return verified
    if edit.pays_in == "memory":
        return _judge_memory(verified, before, after)
    gains = [b.training_seconds / a.training_seconds for b, a in zip(before, after)
             if b.training_seconds and a.training_seconds]
    verified.gain = statistics.median(gains) if gains else None
    verified.finding_gone = all(edit.finding not in {f.id for f in r.findings} for r in after)
    verified.training_unchanged, verified.training_why = compare_losses(before[0].losses, after[0].losses,
                                                                        edit.numbers)
    if verified.gain is None:
        verified.why = "no fit was timed in the reruns"
    elif verified.gain < PAYS:
        verified.why = f"it does not pay: training {verified.gain:.2f}x as fast (under {PAYS:.2f}x)"
    elif len(before) > 1 and not _apart(before, after):
        verified.why = (f"within the spread of its reruns: training {_span(before)} as it is, {_span(after)} with it "
                        f"({len(before)} pairs; a fix pays when it is faster in more than half of them)")
    elif verified.training_unchanged is False:
        verified.why = f"it changes the training: {verified.training_why}"
    else:
        verified.pays = True
    return verified


def _judge_memory(verified: Verified, before: list[Rerun], after: list[Rerun]) -> Verified:
    """A memory fix pays when the job's memory peak is at least 5% lower (medians of the pairs)."""
    peaks = [(b.rss_peak_bytes, a.rss_peak_bytes) for b, a in zip(before, after) if b.rss_peak_bytes
             and a.rss_peak_bytes]
    verified.before["rss_peak_bytes"] = _median([float(b) for b, _ in peaks]) if peaks else None
    verified.after["rss_peak_bytes"] = _median([float(a) for _, a in peaks]) if peaks else None
    verified.gain = statistics.median(b / a for b, a in peaks) if peaks else None  # how many times less memory
    verified.finding_gone = all(verified.edit.finding not in {f.id for f in r.findings} for r in after)
    verified.training_unchanged, verified.training_why = compare_losses(before[0].losses, after[0].losses,
                                                                        verified.edit.numbers)
    if verified.gain is None:
        verified.why = "no memory peak was read in the reruns"
    elif verified.gain < PAYS:
        verified.why = f"it does not pay: the memory peak {1 / verified.gain:.2f}x of what it was (not 5% lower)"
    else:
        verified.pays = True
    return verified


def judge_patch(edits: list[Edit], before: list[Rerun], after: list[Rerun]) -> Verified:
    """The paying fixes together (the patch ``--apply`` writes), against the same reruns as they were: every
    finding they fix gone or not, the losses held to the loosest tolerance among them."""
    numbers: Numbers = "close" if any(e.numbers == "close" for e in edits) else "equal"
    together = judge(Edit(",".join(dict.fromkeys(e.finding for e in edits)), "patch", edits[0].site,
                          "the fixes that paid, together", numbers, edits[0].change,
                          steps_per_call=max(e.steps_per_call for e in edits)), before, after)
    findings = {e.finding for e in edits}
    together.finding_gone = all(not findings & {f.id for f in r.findings} for r in after)
    return together
