"""A job that forks once while it holds 200 MiB: the child shares every page, sleeps, and exits.

    python brief_fork.py [SECONDS]

Summed RSS counts the 200 MiB twice while the child lives (~400 MiB); the kernel holds them once."""

import os
import sys
import time

HELD = bytearray(200 << 20)
HELD[::4096] = b"\x01" * len(HELD[::4096])  # touched: resident in the parent, shared by the fork

if __name__ == "__main__":
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1.5
    time.sleep(0.5)  # sampled alone first
    child = os.fork()
    if child == 0:
        time.sleep(seconds)
        os._exit(0)
    os.waitpid(child, 0)
    time.sleep(0.5)
    print("forked and waited")
