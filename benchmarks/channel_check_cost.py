"""What the hook's descriptor check (one ``fstat`` before each write: is the descriptor still the
events file it opened?) costs per event, in the job.

Emits the same small event through the real :class:`~tensorgauge.hook.channel.Channel` and through
one whose check is skipped, in alternating blocks (the machine's noise hits both alike), into a
file in /dev/shm as under ``tensorgauge run``. Reported: the median CPU microseconds per event of each,
the median of their paired differences, and a bare ``os.fstat`` call for scale.

    python benchmarks/channel_check_cost.py [BLOCKS] [EVENTS_PER_BLOCK]
"""

import os
import statistics
import sys
import tempfile
import time

from tensorgauge.hook.channel import Channel

BLOCKS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
EVENTS = int(sys.argv[2]) if len(sys.argv) > 2 else 500


class Unchecked(Channel):
    """The channel as it was: it trusts its descriptor."""

    def _still_ours(self, fd: int) -> bool:
        return True


def per_event_us(channel: Channel) -> float:
    """CPU microseconds per event (CPU, not wall: a busy machine preempts, it does not add CPU)."""
    began = time.process_time()
    for i in range(EVENTS):
        channel.emit("phase_end", id=i)
    return 1e6 * (time.process_time() - began) / EVENTS


def main() -> int:
    folder = tempfile.mkdtemp(dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    path = os.path.join(folder, "events.jsonl")
    open(path, "w").close()
    checked, unchecked = Channel(path), Unchecked(path)
    times: dict[str, list[float]] = {"checked": [], "unchecked": []}
    try:
        for block in range(BLOCKS):
            if block % 50 == 0:
                os.truncate(path, 0)  # the file stays small, as the monitor reads it
            pair = [("checked", checked), ("unchecked", unchecked)]
            for name, channel in pair if block % 2 else pair[::-1]:  # each goes first in half the blocks
                times[name].append(per_event_us(channel))
        fd = os.open(path, os.O_RDONLY)
        began = time.process_time()
        for _ in range(100_000):
            os.fstat(fd)
        fstat_us = 1e6 * (time.process_time() - began) / 100_000
        os.close(fd)
    finally:
        os.remove(path)
        os.rmdir(folder)
    with_check, without = statistics.median(times["checked"]), statistics.median(times["unchecked"])
    diffs = [a - b for a, b in zip(times["checked"], times["unchecked"])]
    print(f"{BLOCKS} blocks of {EVENTS} events each way")
    print(f"  emit with the descriptor check:    {with_check:.2f} us per event")
    print(f"  emit without it:                   {without:.2f} us per event")
    print(f"  the check: median of paired differences {statistics.median(diffs):+.2f} us per event "
          f"({100 * statistics.median(diffs) / without:+.1f}%); os.fstat alone {fstat_us:.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
