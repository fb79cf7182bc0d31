"""Step times kept compactly: a phase's steps as a digest, not a list.

A day at 100 steps a second is 8.6 M steps. A :class:`StepDigest` keeps, for
the steps of one phase (or a stretch of it), what the analysis and the charts
read, in a few KB whatever the count:

- the count, sum, minimum and maximum, exact;
- a DDSketch of the durations (Datadog's ``ddsketch``): any quantile within
  :data:`RELATIVE_ACCURACY` of the true value, and mergeable, so an epoch's
  digests add up to the fit's;
- the first :data:`FIRST_STEPS` steps of the phase and its
  :data:`SLOWEST_STEPS` slowest, exactly (duration and end);
- how many steps ended in each second of the run (the steps-per-second chart).

The monitor turns the hook's ``steps`` events into ``step_digest`` events
(:mod:`tensorgauge.monitoring.recorder`); a run stored by an older version,
with raw ``steps`` events, gets the same digests when it is read.
"""

from __future__ import annotations

import base64
import heapq
import math
from typing import TYPE_CHECKING, Any

from tensorgauge.hook.protocol import StepDigest as DigestPayload
from tensorgauge.hook.protocol import Steps

if TYPE_CHECKING:
    from tensorgauge.model import Event

FIRST_STEPS = 100
SLOWEST_STEPS = 10
RELATIVE_ACCURACY = 0.005  # half the 1% the analysis promises: merged digests keep it


def _sketch():
    from ddsketch import DDSketch

    return DDSketch(relative_accuracy=RELATIVE_ACCURACY)


class StepDigest:
    """The steps of one phase of one process (``phase``: the hook's phase id)."""

    def __init__(self, phase: int | None = None, sketch=None):
        self.phase = phase
        self.count = 0
        self.seconds_sum = 0.0
        self.seconds_min = math.inf
        self.seconds_max = 0.0
        self.first: list[tuple[float, float]] = []  # (end, seconds) of the first steps
        self.slowest: list[tuple[float, float]] = []  # min-heap of (seconds, end)
        self.rate: dict[int, int] = {}  # whole second of the run -> steps that ended in it
        self.last_end: float | None = None  # when the last step ended (seconds from the run's start)
        self.sketch = sketch if sketch is not None else _sketch()

    def add(self, seconds: list[float], ends: list[float] | None = None, first_room: int | None = None) -> None:
        """Record steps (``ends``: when each ended, seconds from the run's start; None: unknown).
        ``first_room``: how many more of the phase's first steps to keep (default: up to :data:`FIRST_STEPS`)."""
        room = FIRST_STEPS - len(self.first) if first_room is None else first_room
        ends_known = ends is not None and len(ends) == len(seconds)
        for i, value in enumerate(seconds):
            value = float(value)
            if not math.isfinite(value) or value < 0:
                continue
            end = float(ends[i]) if ends_known and ends is not None else math.nan
            self.count += 1
            self.seconds_sum += value
            self.seconds_min = min(self.seconds_min, value)
            self.seconds_max = max(self.seconds_max, value)
            self.sketch.add(value)
            if room > 0:
                self.first.append((end, value))
                room -= 1
            if len(self.slowest) < SLOWEST_STEPS:
                heapq.heappush(self.slowest, (value, end))
            elif value > self.slowest[0][0]:
                heapq.heapreplace(self.slowest, (value, end))
            if ends_known and math.isfinite(end):
                self.last_end = end if self.last_end is None else max(self.last_end, end)
                second = int(math.floor(end))
                self.rate[second] = self.rate.get(second, 0) + 1

    def merge(self, other: StepDigest) -> StepDigest:
        """Add ``other``'s steps to this digest (its first steps after ours); returns self."""
        if not other.count:
            return self
        self.count += other.count
        self.seconds_sum += other.seconds_sum
        self.seconds_min = min(self.seconds_min, other.seconds_min)
        self.seconds_max = max(self.seconds_max, other.seconds_max)
        self.first += other.first
        for item in other.slowest:
            if len(self.slowest) < SLOWEST_STEPS:
                heapq.heappush(self.slowest, item)
            elif item[0] > self.slowest[0][0]:
                heapq.heapreplace(self.slowest, item)
        for second, n in other.rate.items():
            self.rate[second] = self.rate.get(second, 0) + n
        if other.last_end is not None:
            self.last_end = other.last_end if self.last_end is None else max(self.last_end, other.last_end)
        self.sketch.merge(other.sketch)
        return self

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) of the durations, within :data:`RELATIVE_ACCURACY`; the maximum is exact."""
        if not self.count:
            return None
        if q >= 1.0:
            return self.seconds_max
        value = self.sketch.get_quantile_value(q)
        return None if value is None else min(max(value, self.seconds_min), self.seconds_max)

    def quantiles(self, points: int) -> list[float]:
        """``points`` evenly spaced quantiles: the distribution's shape, for a histogram."""
        if not self.count:
            return []
        return [q for q in (self.quantile((i + 0.5) / points) for i in range(points)) if q is not None]

    def slowest_steps(self) -> list[tuple[float, float]]:
        """(seconds, end) of the slowest steps kept, slowest first."""
        return sorted(self.slowest, reverse=True)

    # -- the ``step_digest`` event's payload ------------------------------------------

    def to_payload(self) -> dict[str, Any]:
        start = min(self.rate, default=0)
        rate = [0] * (max(self.rate, default=-1) - start + 1)
        for second, n in self.rate.items():
            rate[second - start] = n
        return {"phase": self.phase, "count": self.count, "seconds_sum": self.seconds_sum,
                "seconds_min": self.seconds_min if self.count else None, "seconds_max": self.seconds_max,
                "first_seconds": [s for _, s in self.first], "first_ends": [_json(e) for e, _ in self.first],
                "slowest_seconds": [s for s, _ in self.slowest], "slowest_ends": [_json(e) for _, e in self.slowest],
                "rate_start": start, "rate": rate, "last_end": _json(self.last_end) if self.last_end is not None else None,
                "sketch": base64.b64encode(_sketch_to_proto(self.sketch).SerializeToString()).decode()}

    @classmethod
    def from_payload(cls, data: DigestPayload) -> StepDigest:
        """The digest of a ``step_digest`` payload; ValueError when it cannot be read."""
        from ddsketch.pb.ddsketch_pb2 import DDSketch as DDSketchMessage

        try:
            message = DDSketchMessage()
            message.ParseFromString(base64.b64decode(data.get("sketch") or ""))
            digest = cls(data.get("phase"), _sketch_from_proto(message) if data.get("count") else None)
            digest.count = int(data.get("count") or 0)
            digest.seconds_sum = float(data.get("seconds_sum") or 0.0)
            least = data.get("seconds_min")
            digest.seconds_min = float(least) if least is not None else math.inf
            digest.seconds_max = float(data.get("seconds_max") or 0.0)
            digest.first = [(_nan(e), float(s)) for e, s in zip(data.get("first_ends") or [],
                                                                data.get("first_seconds") or [])]
            digest.slowest = [(float(s), _nan(e)) for s, e in zip(data.get("slowest_seconds") or [],
                                                                  data.get("slowest_ends") or [])]
            heapq.heapify(digest.slowest)
            start = int(data.get("rate_start") or 0)
            digest.rate = {start + i: int(n) for i, n in enumerate(data.get("rate") or []) if n}
            last = data.get("last_end")
            digest.last_end = float(last) if last is not None and math.isfinite(float(last)) else None
        except Exception as exc:  # protobuf's DecodeError, a bad value: a damaged digest
            raise ValueError(f"damaged step digest ({type(exc).__name__}: {exc})") from None
        return digest


def _sketch_to_proto(sketch):
    """What ``ddsketch.pb.proto.DDSketchProto.to_proto`` gives, each store's bins cut to those from its
    least key to its greatest: a store grows 128 bins at a time, and a one-step digest's were 1.7 KB
    of empty bins, once more for each digest in memory and in every merge."""
    from ddsketch.pb.proto import KeyMappingProto, pb

    def trimmed(store):
        if not store.count:
            return pb.Store()
        low = store.min_key - store.offset
        return pb.Store(contiguousBinCounts=store.bins[low:store.max_key - store.offset + 1],
                        contiguousBinIndexOffset=store.min_key)

    return pb.DDSketch(mapping=KeyMappingProto.to_proto(sketch._mapping), positiveValues=trimmed(sketch._store),
                       negativeValues=trimmed(sketch._negative_store), zeroCount=sketch._zero_count)


def _store_from_proto(proto):
    """A DenseStore from its protobuf, its bins taken whole (ddsketch's own ``StoreProto.from_proto``
    adds them one at a time: 10 s for a week's digests)."""
    from types import SimpleNamespace

    from ddsketch.store import DenseStore

    store = DenseStore()
    bins = [float(c) for c in proto.contiguousBinCounts]
    nonzero = [i for i, count in enumerate(bins) if count]
    if nonzero:  # the empty bins at either end (a digest of an older version kept them) left out
        offset = int(proto.contiguousBinIndexOffset) + nonzero[0]
        bins = bins[nonzero[0]:nonzero[-1] + 1]
        # copy() reads only these attributes of the store it copies
        store.copy(SimpleNamespace(bins=bins, count=sum(bins), min_key=offset,  # type: ignore[arg-type]
                                   max_key=offset + len(bins) - 1, offset=offset))
    return store


def _sketch_from_proto(message):
    """What ``ddsketch.pb.proto.DDSketchProto.from_proto`` gives, faster."""
    from ddsketch.ddsketch import BaseDDSketch
    from ddsketch.pb.proto import KeyMappingProto

    return BaseDDSketch(mapping=KeyMappingProto.from_proto(message.mapping),
                        store=_store_from_proto(message.positiveValues),
                        negative_store=_store_from_proto(message.negativeValues), zero_count=message.zeroCount)


def _json(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 6)


def _nan(value: Any) -> float:
    return math.nan if value is None else float(value)


def digest_steps(events: list[Event]) -> list[Event]:
    """``events`` with the raw ``steps`` events (a run recorded by an older version) replaced by one
    ``step_digest`` event per phase, at the end (its t: the phase's last steps event)."""
    from tensorgauge.hook.protocol import Kind
    from tensorgauge.model import Event

    kept: list[Event] = []
    digests: dict[tuple, StepDigest] = {}
    last_t: dict[tuple, float] = {}
    for event in events:
        if event.kind != Kind.STEPS:
            kept.append(event)
            continue
        steps = event.read(Steps)
        key = (event.pid, steps.get("phase"))
        digest = digests.setdefault(key, StepDigest(key[1]))
        seconds = [x for x in steps.get("seconds") or () if isinstance(x, (int, float))]
        ends = steps.get("ends")
        digest.add(seconds, ends if isinstance(ends, list) and len(ends) == len(seconds) else None)
        last_t[key] = event.t
    return kept + [Event(t=last_t[key], pid=key[0], kind=Kind.STEP_DIGEST, data=digest.to_payload())
                   for key, digest in digests.items()]
