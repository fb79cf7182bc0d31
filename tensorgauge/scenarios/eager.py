"""Eager: fit with run_eagerly=True, every op dispatched from Python."""

from tensorgauge.scenarios._common import arrays, dense_model

if __name__ == "__main__":
    x, y = arrays(3072, 64)
    dense_model(256, 64, run_eagerly=True).fit(x, y, batch_size=64, epochs=2, verbose=0)
