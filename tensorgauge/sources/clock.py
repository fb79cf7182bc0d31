"""The real clock: CLOCK_MONOTONIC, shared by every process on the machine."""

from __future__ import annotations

import time


class MonotonicClock:
    def now(self) -> float:
        return time.monotonic()
