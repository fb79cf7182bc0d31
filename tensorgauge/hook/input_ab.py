"""Whether input costs a fit its steps: the A/B a careful engineer would run, inside the job.

The fit's own train function is timed on the fit's iterator (real steps) and on
batches already made (compute-only steps: no input work at all), in rounds, so
that drift (a noisy neighbour, a CPU clocking down) falls on both sides alike:

- untimed steps, :data:`SETTLE_STEPS` or about three for every step the pause
  before lasted (the pause let the pipeline fill its prefetch buffer: the steps
  that drain it are not typical);
- :data:`REAL_STEPS` real steps or more, each timed to the end of its results,
  spanning enough time for the machine's other load over them to be read;
- an excursion of :data:`PROBE_STEPS` compute-only steps or more, as long as the
  real steps where they are short, its load read over them alone where they last
  long enough, else from the pull before them (the first two left
  out: the pipeline's threads, still filling its buffer, take cores from them;
  with one left out, a serial Python map's 35% cost read as 11-27%). Where the
  fit's batches are small enough to hold (:data:`STASH_MAX_BYTES`), these are
  the fit's own next steps: their batches pulled from its iterator at once,
  a wait for the pipeline's threads to refill its buffers (the tool's pause),
  then trained on, in order, one a step of Keras' loop: no
  step is added and nothing is restored, so the excursion costs only the
  holding of the batches. Otherwise they are extra steps on one batch the fit
  produced, repeated, between two real steps, each after a pause as long as
  Keras' loop leaves between two real steps (a step right after another finds
  TensorFlow's threads still spinning, one after Python's work between steps
  does not: 5-8% of a 5 ms step), every variable they touch restored after.

Rounds are sized by time as well as steps (:class:`Sizes`): steps of 0.7 ms get rounds of about 170
real and as many compute-only steps, steps of 20 ms or more eight and six; a fit too short for three
such rounds, or of unknown length, gets compact ones (58 and 31 for 0.7 ms, their load may go unread).
A fit too short for :data:`MIN_ROUNDS` rounds within it, but with :data:`AFTER_FIT_MIN_STEPS` steps or
more left, has every step left timed, and as it ends, three blocks of its steps are held against three
blocks of as many compute-only steps.

The difference of the medians is what input costs a step, whether the step waits
for its batch or the pipeline's threads take the cores from the step; the rounds
give its spread. Both sides run the same train function on the same thread, so
Keras' Python loop around it and the dispatch of ``IteratorGetNext`` are in
neither difference. Sent as one ``input_ab`` event. Extra excursions cost compute
steps (the real steps cost two clock reads): the first is cut short at its share
of the allowance, each later one is run only if the last one's cost still fits
and the rounds so far leave a doubt, and a fit too short (or too costly) for
:data:`MIN_ROUNDS` says so.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass

from tensorgauge.hook import machine_load
from tensorgauge.hook.channel import channel
from tensorgauge.hook.diagnose import steps_per_call
from tensorgauge.hook.probes import batch_bytes, cached_input, repeated, restored, shapes_of, stashed, time_steps
from tensorgauge.hook.protocol import (
    AB_EXTRA_ROUNDS,
    AB_MIN_ROUNDS,
    INPUT_HIGH,
    INPUT_MODERATE,
    Kind,
    disturbed_round,
    error_text,
    round_share,
    round_share_error,
    rounds_in_doubt,
    share_interval,
)
from tensorgauge.hook.timing import wait_for, wait_until_quiet

ROUNDS, MIN_ROUNDS = 5, AB_MIN_ROUNDS
EXTRA_ROUNDS = AB_EXTRA_ROUNDS  # run in place of disturbed rounds (a neighbour came or went: see disturbed_round)
# The rounds a verdict needs may spend up to this many allowances, the rest only the allowance: a fit whose
# rounds cost about the allowance got a verdict in 1 run of 4 as the estimate fell either side of it.
VERDICT_ALLOWANCES = 3
SETTLE_STEPS, REAL_STEPS, PROBE_STEPS = 2, 8, 6
MAX_SETTLE_STEPS = 24
_DROPPED = 2  # compute-only steps left out of each excursion (the pipeline still fills its buffer meanwhile)
# Rounds sized by time as well as steps: a round's timed real steps span at least ROUND_SECONDS, its compute-only
# steps half that (eight real steps of 0.7 ms were 6 ms of evidence, and the verdict flipped from run to run).
ROUND_SECONDS, MAX_ROUND_STEPS = 0.04, 256
# ... and the real steps long enough for the machine's load over them to be read (machine_load.MIN_SPAN_SECONDS,
# planned with a margin): eight real steps of 12 ms read none, so a neighbour busy in them and not in the round's
# compute-only steps went unseen (the healthy demo beside another test's jobs: rounds of 40%, "input costs 28%").
REAL_SECONDS = max(ROUND_SECONDS, 1.2 * machine_load.MIN_SPAN_SECONDS)
AFTER_FIT_MIN_STEPS = 9  # a fit with fewer timed steps left than this gets no verdict (3 blocks of 3)
# The most an excursion's batches pulled ahead may hold; larger ones get extra steps on one batch instead.
STASH_MAX_BYTES = 64 << 20
# The longest wait for the pipeline to refill its buffers after a pull: twice the pull, at least 50 ms.
QUIET_PER_PULL, QUIET_MIN_SECONDS = 2.0, 0.05
UNTIMED_OUTLIER = 10.0  # an untimed step this many times the real steps' median is a pause, not a step
CAPTURED = "a batch the fit produced"
PULLED = "the fit's own next batches, pulled ahead"


@dataclass(frozen=True)
class Sizes:
    """A round's steps for the fit's step time: the timed real ones, the compute-only ones of an excursion
    (the first :data:`_DROPPED` left out) and the most untimed ones after an excursion; ``readable``: each
    side long enough for the machine's load over it to be read (:meth:`for_step`)."""

    real: int = REAL_STEPS
    probe: int = PROBE_STEPS
    max_settle: int = MAX_SETTLE_STEPS
    readable: bool = False

    @classmethod
    def for_step(cls, step_seconds: float | None, readable: bool = True) -> Sizes:
        """Rounds of real steps spanning :data:`REAL_SECONDS` (at least :data:`REAL_STEPS`), and excursions as
        long, with :data:`ROUND_SECONDS` / 2 of kept compute-only steps at least; not ``readable``: compact
        rounds, real steps spanning :data:`ROUND_SECONDS` and the kept compute-only ones half that."""
        if not step_seconds or step_seconds <= 0:
            return cls()
        kept = max(PROBE_STEPS - _DROPPED, math.ceil(ROUND_SECONDS / 2 / step_seconds))
        least = _DROPPED + min(MAX_ROUND_STEPS, kept)
        settle = max(MAX_SETTLE_STEPS, 3 * least)  # what a compact excursion leaves to drain, at most
        if not readable:
            return cls(min(MAX_ROUND_STEPS, max(REAL_STEPS, math.ceil(ROUND_SECONDS / step_seconds))), least, settle)
        span = math.ceil(REAL_SECONDS / step_seconds)
        return cls(min(MAX_ROUND_STEPS, max(REAL_STEPS, span)),
                   max(least, min(_DROPPED + MAX_ROUND_STEPS, span)), settle, readable=True)

    def steps_for(self, rounds: int) -> int:
        """The fit's steps that ``rounds`` rounds take: the untimed ones after the pause before each (the first
        round has none before it; an excursion lasts about as many real steps as it has compute-only ones, so
        about three times that drain after it), the timed ones, and those that hold the excursion: the one an
        excursion of extra steps runs in; a readable round's stashed steps, as many as its real ones (a
        compact round's few fit in the margin of its drained steps, at most three for each)."""
        if not rounds:
            return 0
        return SETTLE_STEPS + self.real + self.held + (rounds - 1) * self.later_round

    @property
    def held(self) -> int:
        """The fit's steps that hold a round's excursion (see :meth:`steps_for`)."""
        return self.probe if self.readable else 1

    @property
    def later_round(self) -> int:
        """The fit's steps a round after the first takes: those drained after the excursion before it, its
        timed ones and those that hold its own excursion."""
        return min(self.max_settle, 3 * self.probe) + self.real + self.held


def steps_for(rounds: int) -> int:
    """The fit's steps that ``rounds`` rounds of the default sizes take."""
    return Sizes().steps_for(rounds)


def sizes_for(steps_left: int | None, step_seconds: float | None) -> Sizes:
    """A fit's round sizes: readable ones where :data:`MIN_ROUNDS` of them fit in its ``steps_left``, else,
    and where its length is unknown (None: a dataset of unknown size in its first epoch), compact ones
    (keras-io's wide-and-deep program, fits of 194 steps of 1.8 ms over CSV files: readable rounds ended
    after one, compact ones give its verdict)."""
    readable = Sizes.for_step(step_seconds)
    if steps_left is not None and readable.steps_for(MIN_ROUNDS) <= steps_left:
        return readable
    return Sizes.for_step(step_seconds, readable=False)


def rounds_plan(steps_left: int | None, step_seconds: float | None = None) -> tuple[int, str | None]:
    """(rounds to run, why none) for a fit with ``steps_left`` steps to go (None: unknown) of
    ``step_seconds``, in the sizes :func:`sizes_for` gives. 0 rounds with no reason: too short for rounds
    within the fit, long enough to time every step left against compute-only steps after it
    (:data:`AFTER_FIT_MIN_STEPS`). The cost is bounded as the rounds run (see :class:`InputAB`). A plan that
    counted only two untimed steps a round started 5 rounds in a warm-up epoch of 54 steps left, which ended
    after 2 of them: their cost paid for no verdict."""
    if steps_left is None:
        return ROUNDS, None
    sizes = sizes_for(steps_left, step_seconds)
    rounds = max((n for n in range(ROUNDS + 1) if sizes.steps_for(n) <= steps_left), default=0)
    if rounds >= MIN_ROUNDS:
        return rounds, None
    if steps_left >= AFTER_FIT_MIN_STEPS + SETTLE_STEPS:  # the untimed ones: the first's batch is kept
        return 0, None
    return 0, (f"the fit had {max(steps_left, 0)} steps left after its warm-up, fewer than the "
               f"{AFTER_FIT_MIN_STEPS + SETTLE_STEPS} the A/B needs")


def _own_or_wider(steps_began: machine_load.Mark | None, pause_began: machine_load.Mark | None,
                  now: machine_load.Mark | None) -> float | None:
    """The other processes' cores over an excursion's compute-only steps, read from their first (``steps_began``)
    where that spans enough to be read, else from the tool's pause before them (``pause_began``): compute-only
    steps much shorter than real ones (an input-bound fit's 4 ms against 70 ms) are rarely long enough, and an
    unread side beside a neighbour leaves its round out."""
    own = machine_load.other_cores(steps_began, now)
    return own if own is not None else machine_load.other_cores(pause_began, now)


class InputAB:
    """Runs the rounds as the fit's steps begin (see the module doc)."""

    def __init__(self, model, fit_input, rounds: int, allowance_seconds: float | None, clock=time.monotonic,
                 sizes: Sizes | None = None, steps_left: int | None = None, keep_steps: int = 0):
        """``rounds`` 0: every step left is timed, and the compute-only steps run once the fit has trained
        (a fit too short for rounds within it: see :meth:`_after_fit`); ``steps_left``: the fit's steps from
        this one on, where known; ``keep_steps``: the fit's steps a round beyond the planned ones (in place of
        a disturbed one) must leave after it (a profiler window's)."""
        self.model, self.fit_input = model, fit_input
        self.steps_left, self.steps_seen = steps_left, 0
        self.keep_steps = keep_steps
        self.rounds, self.allowance_seconds, self.clock = rounds, allowance_seconds, clock
        self.sizes = sizes or Sizes()
        self.after_fit = rounds == 0
        self.real: list[list[float]] = [[]]
        self.compute: list[list[float]] = []
        self.excursions: list[list[float]] = []  # [start, end] of each compute-only excursion, on the clock
        self.pauses: list[float] = []  # per excursion: seconds the fit's iterator went unread
        self.round_costs: list[float] = []  # per excursion: seconds it added to the fit
        self.own_pauses: list[list[float]] = []  # [start, end] of the tool's other pauses (the batch captured)
        self.setup_seconds = 0.0  # the making of the cached batch (once)
        self._setup_in_excursion = 0.0  # ... when the first excursion made it (no batch captured from the fit)
        self.settle = SETTLE_STEPS
        self.timing = False
        self.cost = 0.0
        self.source: str | None = None
        self.shapes: list[list[int]] | None = None
        self.spec = None  # the element spec of fit's own iterator
        self.settled = SETTLE_STEPS  # the most real steps left untimed after an excursion
        self.gaps: list[float] = []  # between a timed real step's end and the next one's start (Keras' loop)
        self.untimed: list[float] = []  # the fit's steps between the rounds' timed ones (settling), each's seconds
        self.last_end: float | None = None
        self.iterator: object | None = None  # the cached batch, repeated
        self.batch_bytes: int | None = None  # what the captured batch holds
        self.pull_due = False  # the next step pulls an excursion's batches ahead
        self.stash: list = []  # per stashed step left: the iterator of the batches pulled ahead
        self.stash_times: list[float] = []  # ... the stashed steps so far
        self.pull_load: machine_load.Mark | None = None  # the machine's load as the pull began
        self.stash_load: machine_load.Mark | None = None  # ... and as the first stashed step began
        self.stash_began = self.stash_cost = 0.0
        self.error: Exception | None = None  # the tool's own, in a step of the fit's: raised at the next begin
        self.original = None  # the fit's train function, while it is wrapped
        self.active = True
        self.measured = False  # finished with MIN_ROUNDS rounds or more
        self.too_slow = False  # the real steps are too long for even one excursion in the allowance
        self.doubt_rounds = 0  # rounds begun while those before them were in doubt (see _in_doubt)
        self.block_began: machine_load.Mark | None = None  # the machine's load as a round's real steps began
        self.block_start = 0.0  # ... and the clock then
        self.other_cores: list[list[float | None]] = []  # per round: others' cores in its real, compute-only steps

    # -- the fit's steps ------------------------------------------------------------

    def on_step_begin(self) -> bool:
        """At the beginning of each of the fit's steps; True once the A/B is over."""
        if not self.active:
            return True
        self.steps_seen += 1
        if self.original is None:
            self._wrap()
        if self.error is not None:
            raise self.error
        if self.pull_due or self.stash:  # an excursion of the fit's own steps is under way
            self.timing = False
            return False
        if not self.after_fit and len(self.real[-1]) >= self.sizes.real and self._load_readable():
            if len(self.compute) < len(self.real):  # the round's excursion is still to run
                if self._stashable():
                    self.pull_due, self.timing = True, False
                    return False
                if not self.compute and not self._first_fits():
                    self.finish()
                    return True
                self._excursion()
            if self._enough() or self._decided() or not self._affordable() or not self._room_for_another():
                self.finish()
                return True
            self.doubt_rounds += self._in_doubt()
            self.real.append([])
            self.settle = self._settle_steps()
            self.settled = max(self.settled, self.settle)
        self.timing = self.settle <= 0
        self.settle -= 1
        return False

    def _load_readable(self) -> bool:
        """The round's real steps so far span enough time for the machine's load over them to be read
        (:data:`~tensorgauge.hook.machine_load.MIN_SPAN_SECONDS`: a round whose steps run faster than planned is
        timed a few steps longer), or cannot be read at all, or the round has twice its planned steps, or the
        fit has no room left for more (:meth:`_room_to_extend`); compact rounds (:class:`Sizes`) as planned."""
        return (not self.sizes.readable or self.block_began is None or self.last_end is None
                or len(self.real[-1]) >= min(MAX_ROUND_STEPS, 2 * self.sizes.real) or not self._room_to_extend()
                or self.last_end - self.block_start >= machine_load.MIN_SPAN_SECONDS)

    def _room_to_extend(self) -> bool:
        """Another real step in this round leaves the fit room for the rest of the rounds a verdict needs, as
        planned (keras-io's wide-and-deep program, fits of 194 steps planned at 6 ms that ran 2 ms: each round
        timed to 0.1 s, they ended after one)."""
        if self.steps_left is None:
            return True
        later = max(0, MIN_ROUNDS - len(self.real))
        return self.steps_seen + self.sizes.held + later * self.sizes.later_round <= self.steps_left

    def _room_for_another(self) -> bool:
        """The planned rounds always; one beyond them only where, at the steps each round has taken so far, it
        leaves the fit its ``keep_steps``."""
        if not self.keep_steps or self.steps_left is None or len(self.compute) < self.rounds:
            return True
        per_round = self.steps_seen / max(1, len(self.compute))
        return self.steps_seen + per_round + self.keep_steps <= self.steps_left

    def _wrap(self) -> None:
        original = self.original = self.model.train_function

        def timed(iterator):
            if self.spec is None:
                self.spec = getattr(iterator, "element_spec", None)
            if self.pull_due:
                self._pull(iterator)
            if self.stash:
                return self._stashed_step(original)
            if self.iterator is None and self.spec is not None and not self.timing and steps_per_call(self.model) == 1:
                return self._capture(original, iterator)
            if not self.timing:
                self.last_end = None
                start = time.monotonic()
                logs = original(iterator)
                self.untimed.append(time.monotonic() - start)
                return logs
            start = time.monotonic()
            if not self.real[-1]:
                self.block_began, self.block_start = machine_load.mark(), start
            if self.last_end is not None:
                self.gaps.append(start - self.last_end)
            logs = original(iterator)
            wait_for(logs)
            self.last_end = time.monotonic()
            self.real[-1].append(self.last_end - start)
            return logs

        self.model.train_function = timed

    def _capture(self, original, iterator):
        """An untimed step that keeps its batch for the compute-only steps: the fit's own next batch, taken
        from its iterator and trained on as fit would (once, in its turn), so any input the model takes
        (strings, ragged, sparse, dicts) is valid and no element is fetched twice."""
        batch = next(iterator)  # the end of the data ends the epoch as it would inside the train function
        began = self.clock()
        try:
            cached = iter(repeated(batch, self.spec))
            self.batch_bytes = batch_bytes(batch)
        except Exception:  # the batch is the job's: it is trained on all the same
            import tensorflow as tf

            return original(iter(tf.data.Dataset.from_tensors(batch)))
        self.iterator, self.source, self.shapes = cached, CAPTURED, shapes_of(batch)
        ended = self.clock()
        self.setup_seconds = ended - began
        self.cost += self.setup_seconds
        self.own_pauses.append([began, ended])  # the making of the cached batch: the tool's, not a stall
        return original(cached)

    def _stashable(self) -> bool:
        """The excursion can be the fit's own next steps: its batches are taken as they pass (the captured
        one could be fed back as fit reads them) and the excursion's few are small enough to hold."""
        return (self.source in (CAPTURED, PULLED) and self.batch_bytes is not None
                and self.sizes.probe * max(self.batch_bytes, 1) <= STASH_MAX_BYTES)

    def _pull(self, iterator) -> None:
        """The excursion's batches taken from the fit's iterator at once (the tool's pause), each to be
        trained on in its turn by the next steps of Keras' loop (:meth:`_stashed_step`). The end of the data
        leaves fewer: after them the fit's iterator ends the epoch as it would have."""
        self.pull_due = False
        began, load = self.clock(), machine_load.mark()
        batches: list = []
        try:
            while len(batches) < self.sizes.probe:
                batches.append(next(iterator))
        except StopIteration:
            pass
        except Exception as exc:
            if type(exc).__name__ != "OutOfRangeError":
                raise
        pulled = self.clock()
        if batches:
            try:
                self.stash = [iter(stashed(batches, self.spec))] * len(batches)
            except Exception:  # the batches are the job's: each is trained on all the same
                import tensorflow as tf

                self.stash = [iter(tf.data.Dataset.from_tensors(batch)) for batch in batches]
        built = self.clock()
        # The pull drained the pipeline's buffers: refilling them, its threads would take the cores (and a
        # py_function map the GIL) from the compute-only steps, as slow as real ones in 2 of 5 rounds of a
        # newcomer's convnet. What it makes meanwhile, the real steps after take without waiting.
        wait_until_quiet(max(QUIET_MIN_SECONDS, QUIET_PER_PULL * (pulled - began)))
        # The others' load is read over the real steps (to the pull) and over the stashed steps, not the pause
        # between (:func:`_own_or_wider`): a neighbour busy in the pause and gone in the stashed steps read as
        # busy beside both.
        self.stash_times, self.pull_load, self.stash_load = [], load, None
        self.stash_began = ended = self.clock()
        self.stash_cost = built - pulled
        self.cost += self.stash_cost
        # The tool's pause: the making of the stash and the wait for the refill. Not the pull: its waits are the
        # fit's own for those batches, paid ahead (and an epoch's start that fell in it stays the job's stall).
        self.own_pauses.append([pulled, ended])

    def _stashed_step(self, original):
        """One of the fit's steps on its batch pulled ahead: a compute-only step, timed to its end."""
        if not self.stash_times:
            self.stash_load = machine_load.mark()
        start = time.monotonic()
        logs = original(self.stash.pop(0))
        wait_for(logs)
        self.stash_times.append(time.monotonic() - start)
        if not self.stash:
            try:
                self._stash_done()
            except Exception as exc:  # the tool's, not the job's step: raised at the next step's begin
                self.error = exc
        return logs

    def _stash_done(self) -> None:
        """The excursion of stashed steps is in (one the data cut too short runs again as the next epoch
        begins)."""
        self.stash = []
        if len(self.stash_times) <= _DROPPED:
            return
        self.compute.append(self.stash_times[_DROPPED:])
        self.round_costs.append(self.stash_cost)
        self.source = PULLED
        self.pauses.append(self.clock() - self.stash_began)
        self.other_cores.append([machine_load.other_cores(self.block_began, self.pull_load),
                                 _own_or_wider(self.stash_load, self.pull_load, machine_load.mark())])

    def _settle_steps(self) -> int:
        """Real steps to leave untimed after an excursion: what the pipeline prefetched during it drains
        at the difference of two rates, so about three steps for every real step the excursion lasted
        (at least :data:`SETTLE_STEPS`, at most the sizes' ``max_settle``)."""
        times = self.real[-2] if len(self.real) > 1 else self.real[-1]
        if not times or not self.pauses:
            return SETTLE_STEPS
        paused = self.pauses[-1]
        step = statistics.median(times)
        return int(min(self.sizes.max_settle, max(SETTLE_STEPS, math.ceil(3 * paused / max(step, 1e-9)))))

    def _clean(self) -> list[int]:
        """The rounds so far that no neighbour disturbed (:func:`disturbed_round`)."""
        return [i for i in range(len(self.compute))
                if not disturbed_round(self.other_cores[i] if i < len(self.other_cores) else None)]

    def _enough(self) -> bool:
        """The planned rounds are in, undisturbed ones (up to :data:`EXTRA_ROUNDS` more run in place of the
        others)."""
        return len(self._clean()) >= self.rounds or len(self.compute) >= self.rounds + EXTRA_ROUNDS

    def _decided(self) -> bool:
        """The rounds so far (:data:`MIN_ROUNDS` or more) leave no doubt, so the rest would cost for nothing:
        their pooled share under half :data:`INPUT_MODERATE` with at most one round at it or more, and that
        one under :data:`INPUT_HIGH` (a noisy round: the analysis outvotes it, and two more rounds could not
        carry a verdict the pool denies), or every round at :data:`INPUT_HIGH` or more. A verdict near the
        threshold gets all its rounds, and so do rounds of which one shows a high cost (keras-io's
        wide-and-deep program, input 35-74% of training: rounds of -45, 68 and -3%, its later rounds 2-3x
        slower real steps than compute-only ones in every run), and rounds all high but in doubt
        (:meth:`_in_doubt`: beside another test's job, rounds of 22, 55 and 34% stopped the A/B, and the
        analysis, reading their spread, withheld the verdict)."""
        rounds = [(self.real[i], self.compute[i]) for i in self._clean()]
        if len(rounds) < MIN_ROUNDS or not all(real and compute for real, compute in rounds):
            return False
        shares = [1 - statistics.median(compute) / statistics.median(real) for real, compute in rounds]
        pooled = 1 - (statistics.median(t for _, compute in rounds for t in compute)
                      / statistics.median(t for real, _ in rounds for t in real))
        agreeing = sum(share >= INPUT_MODERATE for share in shares)
        return ((agreeing <= 1 and pooled < INPUT_MODERATE / 2 and max(shares) < INPUT_HIGH)
                or (min(shares) >= INPUT_HIGH and not self._in_doubt()))

    def _first_fits(self) -> bool:
        """The first excursion's fewest compute-only steps, at most a real step each, fit in its share of what a
        verdict may cost (the steps of a minute-long fit of 350 ms steps do not)."""
        if self.allowance_seconds is None:
            return True
        limit = VERDICT_ALLOWANCES * self.allowance_seconds / MIN_ROUNDS
        self.too_slow = (_DROPPED + 1) * statistics.median(self.real[-1]) > limit
        return not self.too_slow

    def _affordable(self) -> bool:
        """Another excursion fits in what is left of the allowance (the last one's cost as its estimate,
        less the first's making of the cached batch, which is not done again: taken from the job's
        pipeline, it was 40-60% of that excursion). The rounds a verdict needs always do: each excursion's
        timing is cut at its third of what they may cost (:meth:`_excursion`), and the first is run only
        where its fewest steps fit (:meth:`_first_fits`). Estimated, keras-io's weather forecaster's third
        round (0.38 s a round, cut at 0.40) was refused in 1 run of 5 by the making of the cached batch."""
        if self.allowance_seconds is None or len(self.compute) < MIN_ROUNDS:
            return True
        return self.cost + self._round_seconds() <= self._limit()

    def _limit(self) -> float:
        """What the rounds may cost in all: :data:`VERDICT_ALLOWANCES` allowances until a verdict's
        :data:`MIN_ROUNDS` undisturbed rounds are in (those run in place of disturbed ones too: beside another
        process that came and went, 2 of 4 rounds of a serial map's 55% cost were, and the allowance refused
        a fifth), and while the rounds so far lean to a cost they do not establish (:meth:`_in_doubt`), then
        the allowance."""
        allowance = self.allowance_seconds or 0.0
        verdict_due = len(self._clean()) < MIN_ROUNDS or self._in_doubt()
        return allowance * VERDICT_ALLOWANCES if verdict_due else allowance

    def _in_doubt(self) -> bool:
        """The undisturbed rounds so far are in doubt (:func:`rounds_in_doubt`; see :meth:`_decided`). Only
        those leaning to a cost get more: on the healthy dense fit of ``benchmarks/tool_cost.py`` running
        all the planned rounds took the A/B from 0.44 to 0.52 s. Each round begun in doubt is one more look
        at their interval (``doubt_rounds``), which widens it: looking until it clears would find a cost in
        rounds that have none."""
        return rounds_in_doubt(*self._clean_shares(), looks=1 + self.doubt_rounds)

    def _clean_shares(self) -> tuple[list[float], list[float]]:
        """The undisturbed rounds' shares and their steps' errors (:func:`round_share_error`)."""
        pairs = [(self.real[i], self.compute[i]) for i in self._clean()
                 if i < len(self.real) and self.real[i] and self.compute[i]]
        return [round_share(r, c) for r, c in pairs], [round_share_error(r, c) for r, c in pairs]

    def _round_seconds(self) -> float:
        """The seconds the last excursion added to the fit, less any making of the cached batch in it."""
        return self.round_costs[-1] if self.round_costs else 0.0

    def _excursion(self, steps: int | None = None, share: float | None = None) -> None:
        """Compute-only steps on the cached batch: ``steps`` (default: the sizes' probe), their timing cut at
        ``share`` seconds (default: a third of the allowance)."""
        began = steps_began = self.clock()
        real_ended = machine_load.mark()
        try:
            if self.iterator is None:
                x, y, batch_size = self.fit_input
                self.iterator, self.source, self.shapes = cached_input(x, y, batch_size, spec=self.spec)
                steps_began = self.clock()
                self.setup_seconds = self._setup_in_excursion = steps_began - began
            # Each excursion's steps get a third of what the rounds may cost so far (the verdict's three
            # allowances until its rounds are in), the making of the cached batch aside: rounds cut to one step
            # by a third of one allowance read a serial map's 35% cost as -20%, and keras-io's weather
            # forecaster's 29% (58 ms steps) as "within noise" from rounds of -5, 43 and 36%.
            if share is None and self.allowance_seconds is not None:
                share = self._limit() / MIN_ROUNDS
            gap = statistics.median(self.gaps) if self.gaps else 0.0
            with restored(self.model):
                computed = machine_load.mark()
                times = time_steps(self.original, self.iterator, steps or self.sizes.probe, share, steps_began,
                                   min_steps=_DROPPED + 1, gap=gap)
            self.compute.append(times[_DROPPED:])
            # (A short fit's real steps, timed in blocks after it, ran long before their excursion: not read.)
            self.other_cores.append([None if self.after_fit else machine_load.other_cores(self.block_began, real_ended),
                                     _own_or_wider(computed, real_ended, machine_load.mark())])
        finally:
            ended = self.clock()
            self.cost += ended - began
            self.excursions.append([began, ended])
            self.pauses.append(ended - began)
            self.round_costs.append(ended - began - (self._setup_in_excursion if len(self.excursions) == 1 else 0.0))

    # -- the end --------------------------------------------------------------------

    def _after_fit(self) -> None:
        """A fit too short for rounds within it: its timed steps, in :data:`MIN_ROUNDS` consecutive blocks,
        each against an excursion of compute-only steps (as a round's) run as the fit ends. No excursion
        drains the pipeline's buffer mid-fit, so no real step settles."""
        timed = self.real[0]
        if len(timed) < AFTER_FIT_MIN_STEPS or self.original is None:
            return
        size = len(timed) // MIN_ROUNDS
        self.real = [timed[i * size:(i + 1) * size] for i in range(MIN_ROUNDS - 1)] + [timed[(MIN_ROUNDS - 1) * size:]]
        for _ in self.real:
            if self.compute and not self._affordable():
                break
            self._excursion()

    def unwrap(self) -> None:
        """Put the fit's train function back (the after-fit excursions call it directly)."""
        if self.original is not None and self.model.train_function is not self.original:
            self.model.train_function = self.original

    def excursions_left(self) -> bool:
        """An after-fit A/B whose compute-only steps are still to run: at :meth:`finish`, which may wait
        until a later fit has measured in rounds (then :meth:`supersede` instead; see :mod:`.input_window`)."""
        return (self.active and self.after_fit and not self.compute and self.original is not None
                and len(self.real[0]) >= AFTER_FIT_MIN_STEPS)

    def supersede(self, why: str) -> None:
        """Report, without running its compute-only steps, an after-fit A/B that a later fit's rounds replaced."""
        if not self.active:
            return
        self.active, self.iterator, self.stash = False, None, []
        self.unwrap()
        now = self.clock()
        channel().emit(Kind.INPUT_AB, skipped=why, cost_seconds=round(self.cost, 4),
                       allowance_seconds=self.allowance_seconds,
                       excursions_before=[[round(now - a, 6), round(now - b, 6)] for a, b in self.own_pauses])

    def finish(self) -> None:
        """Put the fit's train function back and report (at the last round, or when the fit ends first)."""
        if not self.active:
            return
        if self.after_fit and not self.compute:
            self.unwrap()
            self._after_fit()
        if self.stash and len(self.stash_times) > _DROPPED:  # the fit ended within an excursion of its steps
            self._stash_done()
        self.active = False
        self.iterator, self.stash = None, []  # the cached batch's pipeline: nothing of it outlives the A/B
        self.unwrap()
        real = self.real[: len(self.compute)]  # complete rounds only
        now = self.clock()
        if len(self.compute) < MIN_ROUNDS:
            costly = self.allowance_seconds is not None and bool(self.round_costs) and not self._affordable()
            last = self._round_seconds()
            allowed = (f"{self._limit():.2f} s ({VERDICT_ALLOWANCES}x the {self.allowance_seconds or 0:.2f} s "
                       "allowed in this fit)")
            if self.too_slow:
                why = (f"compute-only steps of up to {statistics.median(self.real[-1]) * 1000:.0f} ms (the real step) "
                       f"would cost more than {allowed}; tensorgauge run --diagnose measures it anyway")
            elif costly:
                why = (f"{MIN_ROUNDS} rounds of compute-only steps ({last:.2f} s a round, measured) would cost more "
                       f"than {allowed}; tensorgauge run --diagnose measures it anyway")
            elif self.after_fit:
                why = (f"the fit timed {len(self.real[0])} steps, fewer than the {AFTER_FIT_MIN_STEPS} the A/B "
                       "needs against compute-only steps")
            else:
                why = (f"the fit ended after {len(self.compute)} of the {MIN_ROUNDS} rounds of real and compute-only "
                       "steps the A/B needs")
            channel().emit(Kind.INPUT_AB, skipped=why, cost_seconds=round(self.cost, 4),
                           allowance_seconds=self.allowance_seconds,
                           excursions_before=[[round(now - a, 6), round(now - b, 6)]
                                              for a, b in self.excursions + self.own_pauses])
            return
        self.measured = True
        channel().emit(Kind.INPUT_AB, real_step_seconds=real, compute_step_seconds=self.compute,
                       cost_seconds=round(self.cost, 4), allowance_seconds=self.allowance_seconds,
                       setup_seconds=round(self.setup_seconds, 4), source=self.source, shapes=self.shapes,
                       settle_steps=self.settled, after_fit=self.after_fit, other_cores=self.other_cores,
                       untimed_steps=self._untimed(real), machine_cpus=os.cpu_count(),
                       doubt_rounds=self.doubt_rounds,
                       excursions_before=[[round(now - a, 6), round(now - b, 6)]
                                              for a, b in self.excursions + self.own_pauses])

    def _untimed(self, real: list[list[float]]) -> list[float] | None:
        """``[seconds, steps]`` of the fit's untimed steps over the A/B, those over :data:`UNTIMED_OUTLIER` x
        the real steps' median left out (a pause at an epoch's start is no step's input); None without any."""
        timed = [t for r in real for t in r]
        if not self.untimed or not timed:
            return None
        bound = UNTIMED_OUTLIER * statistics.median(timed)
        kept = [t for t in self.untimed if t <= bound]
        return [round(sum(kept), 6), len(kept)]

    def conclusive(self) -> bool:
        """The undisturbed rounds' 95% interval is clear of :data:`INPUT_MODERATE`, either way: rounds in a
        later fit could not turn the verdict (see :mod:`.input_window`)."""
        shares, errors = self._clean_shares()
        if len(shares) < MIN_ROUNDS:
            return False
        low, high = share_interval(shares, errors, looks=1 + self.doubt_rounds)
        return low >= INPUT_MODERATE or high < INPUT_MODERATE

    def median_share(self) -> float:
        """Input's share of the real step so far (the analysis gives the verdict; this sizes the follow-up)."""
        real = [t for r in self.real[: len(self.compute)] for t in r]
        compute = [t for r in self.compute for t in r]
        if not real or not compute:
            return 0.0
        step = statistics.median(real)
        return max(0.0, 1 - statistics.median(compute) / step) if step > 0 else 0.0

    def fail(self, exc: BaseException) -> None:
        self.active, self.iterator, self.stash = False, None, []
        self.unwrap()
        channel().emit(Kind.INPUT_AB, error=error_text(exc))

