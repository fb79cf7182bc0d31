"""A healthy job with forked workers: the parent holds 200 MiB, a fork pool of 8 workers only reads it.

    python forked_workers.py [SECONDS]

Summed RSS counts the parent's pages 9 times (~1.9 GiB); the kernel charges them once (~216 MiB)."""

import multiprocessing
import sys
import time

HELD = bytearray(200 << 20)
HELD[::4096] = b"\x01" * len(HELD[::4096])  # touched: resident in the parent, shared by the forks


def read_held(seconds: float) -> int:
    """A worker: reads the parent's pages (copy-on-write, never written), then stays a while."""
    total = sum(HELD[::4096])
    time.sleep(seconds)
    return total


if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    with multiprocessing.get_context("fork").Pool(8) as pool:
        results = pool.map(read_held, [seconds] * 8)
    assert all(r == results[0] for r in results)
    print("workers done")
