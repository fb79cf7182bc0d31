"""Writes one run into the store as it happens: samples and the hook's events.

Event times arrive on the system-wide monotonic clock and are stored relative
to the run's start ``t0``; environment facts from the job are merged into the
run's fingerprint.
"""

from __future__ import annotations

from tensorgauge.model import Event, RunRecord, Sample
from tensorgauge.store import Store


def to_event(raw: dict, t0: float) -> Event:
    data = {k: v for k, v in raw.items() if k not in ("t", "pid", "kind")}
    if raw["kind"] == "steps" and isinstance(data.get("ends"), list):
        data["ends"] = [round(float(x) - t0, 6) for x in data["ends"]]
    return Event(t=float(raw["t"]) - t0, pid=int(raw.get("pid") or 0), kind=str(raw["kind"]), data=data)


class Recorder:
    def __init__(self, store: Store, record: RunRecord, t0: float):
        self.store, self.record, self.t0 = store, record, t0

    def flush(self, samples: list[Sample], raw_events: list[dict]) -> None:
        events = []
        for raw in raw_events:
            try:
                event = to_event(raw, self.t0)
            except (TypeError, ValueError):
                continue  # not ours, or damaged: skip rather than stop recording
            if event.kind == "env" and isinstance(event.data.get("facts"), dict):
                self.record.env.setdefault("job", {}).update(event.data["facts"])
                self.store.save_run(self.record)
            events.append(event)
        self.store.add(self.record.run_id, samples, events)
