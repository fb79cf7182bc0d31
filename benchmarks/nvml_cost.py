"""What one NVML reading costs the monitor, per sample: every GPU's utilisation,
memory and power, then the same plus the job's own share (per-process memory).

Run on a machine with an NVIDIA GPU (prints a line and exits 1 without one):

    python benchmarks/nvml_cost.py [READS]
"""

import os
import sys
import time

from tensorgauge.sources.nvml import NoGpus, open_gpus

READS = int(sys.argv[1]) if len(sys.argv) > 1 else 500


def per_read_ms(read, reads: int) -> tuple[float, float]:
    """(wall, CPU) milliseconds per call, over ``reads`` calls after a warm-up."""
    read()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(reads):
        read()
    return (1000 * (time.perf_counter() - wall0) / reads, 1000 * (time.process_time() - cpu0) / reads)


def main() -> int:
    gpus = open_gpus()
    if isinstance(gpus, NoGpus):
        print("no NVIDIA GPU found through NVML")
        return 1
    pids = (os.getpid(),)
    print(f"{len(gpus.names)} GPU(s): {', '.join(gpus.names)}; {READS} reads each")
    for label, read in (("device figures", gpus.read), ("with the job's share", lambda: gpus.read(pids))):
        wall, cpu = per_read_ms(read, READS)
        print(f"{label:>22}: {wall:.3f} ms wall, {cpu:.3f} ms CPU per sample "
              f"({cpu:.2f}% of a core at 10 samples/s)")
    gpus.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
