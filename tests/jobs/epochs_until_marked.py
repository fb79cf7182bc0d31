"""A plain-Python job with a fit of three epochs of steps (no TensorFlow).

    python epochs_until_marked.py [MARKER]

With MARKER, it writes the file in epoch 2 and waits there (to be killed part-way)."""

import pathlib
import sys
import time

import tensorgauge

marker = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else None
with tensorgauge.phase("fit", kind="fit"):
    for epoch in range(1, 4):
        with tensorgauge.phase(f"epoch {epoch}", kind="epoch"):
            for _ in range(30):
                sum(i * i for i in range(30_000))
                tensorgauge.step()
            if epoch == 2 and marker is not None:
                marker.write_text("in epoch 2")
                time.sleep(120)
