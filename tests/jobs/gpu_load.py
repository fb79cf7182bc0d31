"""A GPU load with no TensorFlow (PyTorch, else CuPy): the GPU idles, then runs
matrix products while holding GPU_LOAD_GIB more memory. NVML sees any framework.

    python tests/jobs/gpu_load.py [SECONDS]
"""

import os
import sys
import time

import tensorgauge

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
GIB = int(os.environ.get("GPU_LOAD_GIB", "4"))


def torch_load():
    import torch

    if not torch.cuda.is_available():
        return None
    torch.zeros(1, device="cuda")  # the CUDA context, before the idle phase

    def busy(seconds):
        held = torch.empty(GIB << 30, dtype=torch.uint8, device="cuda")
        a = torch.randn(8192, 8192, device="cuda")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(10):
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
        del held
    return busy


def cupy_load():
    import cupy

    cupy.zeros(1)

    def busy(seconds):
        held = cupy.empty(GIB << 30, dtype=cupy.uint8)
        a = cupy.random.standard_normal((8192, 8192), dtype=cupy.float32)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(10):
                a = cupy.clip(a @ a, -1, 1)
            cupy.cuda.Device().synchronize()
        del held
    return busy


def main() -> None:
    busy = None
    for make in (torch_load, cupy_load):
        try:
            busy = make()
        except ImportError:
            continue
        if busy:
            break
    if busy is None:
        sys.exit("gpu_load: needs PyTorch or CuPy with CUDA")
    with tensorgauge.phase("gpu idle"):
        time.sleep(1.5)
    with tensorgauge.phase("gpu busy"):
        busy(SECONDS)


if __name__ == "__main__":
    main()
