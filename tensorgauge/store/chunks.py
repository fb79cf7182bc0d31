"""Samples stored compactly: a chunk of consecutive samples as one compressed blob.

Each column of a :class:`~tensorgauge.series.SampleSeries` is transformed so
that consecutive values give runs of zero bytes, then all of them are
compressed at once with Zstandard:

- a column of numbers with few decimals (bytes and counts; CPU seconds in
  hundredths; times in microseconds) is scaled to integers and delta-encoded:
  RSS that moves by a page gives small deltas;
- any other column is XOR-ed with its previous value's bits (Gorilla, as in
  Prometheus' TSDB): an unchanged figure costs a zero word;
- the words are byte-shuffled (byte 0 of every value, then byte 1, ...), which
  turns the zero high bytes of small deltas into long runs.

Lossless: decoding gives back the exact float64 bits (NaN for not reported).
Measured on a synthetic day (``benchmarks/long_run.py``): see docs/measurements.md.
"""

from __future__ import annotations

import io
import json
import struct

import numpy as np

from tensorgauge.series import GPU_COLUMNS, SCALARS, SampleSeries
from tensorgauge.store.schema import CHUNK_SAMPLES

MAGIC = b"TGC1"
SCALES = (0, 1, 2, 3, 4, 6)  # decimals tried: psutil CPU times have 2, the sampler rounds t to 6
LEVEL = 3  # zstd level: 1-19; 3 is its default, within 10% of 19's size at a tenth of the time


def _compressor():
    import zstandard

    return zstandard.ZstdCompressor(level=LEVEL)


def _decompressor():
    import zstandard

    return zstandard.ZstdDecompressor()


def _scale(finite: np.ndarray) -> int | None:
    """The fewest decimals of :data:`SCALES` that hold every value exactly as an integer, or None."""
    if not np.all(np.isfinite(finite)):
        return None
    largest = float(np.abs(finite).max())
    for decimals in SCALES:
        factor = 10.0**decimals
        if largest * factor >= 2**53:
            return None
        if np.array_equal(np.round(finite * factor) / factor, finite):
            return decimals
    return None


def _encode(values: np.ndarray) -> tuple[str, bytes]:
    """One column (any shape, float64) as (encoding, bytes): ``xor``, or ``delta``/``delta_masked``
    followed by the decimals the values were scaled by (``delta2``: hundredths)."""
    flat = np.ascontiguousarray(values, dtype=np.float64).reshape(-1, order="F")
    if not len(flat):
        return "raw", b""
    present = ~np.isnan(flat)
    decimals = _scale(flat[present]) if present.any() else None
    if decimals is not None:
        mask = np.packbits(~present).tobytes() if not present.all() else b""
        scaled = np.round(np.where(present, flat, 0.0) * 10.0**decimals).astype(np.int64)
        words = np.diff(scaled, prepend=np.int64(0)).view(np.uint64)
        return f"{'delta_masked' if mask else 'delta'}{decimals}", mask + _shuffle(words)
    bits = flat.view(np.uint64)
    return "xor", _shuffle(np.bitwise_xor(bits, np.concatenate([[np.uint64(0)], bits[:-1]])))


def _decode(encoding: str, data: bytes, count: int) -> np.ndarray:
    if encoding == "raw" or count == 0:
        return np.zeros(0)
    if encoding == "xor":
        return np.bitwise_xor.accumulate(_unshuffle(data, count)).view(np.float64)
    kind, decimals = encoding.rstrip("0123456789"), int(encoding[len(encoding.rstrip("0123456789")):])
    if kind not in ("delta", "delta_masked"):
        raise ValueError(f"unknown column encoding {encoding!r}")
    mask_bytes = (count + 7) // 8 if kind == "delta_masked" else 0
    values = np.cumsum(_unshuffle(data[mask_bytes:], count).view(np.int64)).astype(np.float64)
    if decimals:
        values = values / 10.0**decimals
    if mask_bytes:
        missing = np.unpackbits(np.frombuffer(data[:mask_bytes], dtype=np.uint8), count=count).astype(bool)
        values[missing] = np.nan
    return values


def _shuffle(words: np.ndarray) -> bytes:
    return words.astype("<u8").view(np.uint8).reshape(-1, 8).T.tobytes()


def _unshuffle(data: bytes, count: int) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8).reshape(8, count).T.copy().view("<u8").reshape(count)


def encode(series: SampleSeries) -> bytes:
    """The series as one blob: magic, header length, JSON header, compressed columns."""
    n = len(series)
    arrays: list[tuple[str, np.ndarray]] = [(name, series.columns[name]) for name in SCALARS]
    arrays += [("cpu_percent", series.cpu_percent), ("cpu_count", series.cpu_count)]
    arrays += [(f"gpu.{name}", series.gpu[name]) for name in GPU_COLUMNS]
    header: dict = {"count": n, "cpus": int(series.cpu_percent.shape[1]), "gpu_index": series.gpu_index,
                    "gpu_names": series.gpu_names, "columns": []}
    payload = []
    for name, values in arrays:
        encoding, data = _encode(values)
        header["columns"].append([name, encoding, len(data)])
        payload.append(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<I", len(head)) + head + _compressor().compress(b"".join(payload))


MAX_COUNT, MAX_CPUS, MAX_GPUS = 100_000, 4096, 64  # what a chunk's header may declare


def header(blob: bytes) -> dict:
    """The chunk's header (``count``, ``cpus``, ``gpu_index``, ``columns``, ...), its bounds checked;
    ValueError when the blob is not a chunk. Reads nothing of the compressed payload."""
    if blob[:4] != MAGIC:
        raise ValueError("not a tensorgauge sample chunk")
    (length,) = struct.unpack("<I", blob[4:8])
    head = json.loads(blob[8:8 + length])
    n, cpus, gpus = int(head["count"]), int(head["cpus"]), len(head["gpu_index"])
    if not (0 <= n <= MAX_COUNT and 0 <= cpus <= MAX_CPUS and gpus <= MAX_GPUS):
        raise ValueError(f"a chunk header out of bounds ({n} samples, {cpus} CPUs, {gpus} GPUs)")
    head["length"] = length
    return head


class DecodedSize:
    """What chunks decode to once joined (:meth:`SampleSeries.concat` widens every sample to the most
    CPUs and to every GPU any chunk has), added up one header at a time."""

    def __init__(self) -> None:
        self.samples, self.cpus, self.gpus = 0, 0, set[int]()

    def add(self, head: dict) -> int:
        """Adds a chunk's header; returns the bytes all the chunks added so far decode to."""
        self.samples += int(head["count"])
        self.cpus = max(self.cpus, int(head["cpus"]))
        self.gpus.update(int(i) for i in head["gpu_index"])
        return self.bytes

    @property
    def bytes(self) -> int:
        return self.samples * (len(SCALARS) + 1 + self.cpus + len(self.gpus) * len(GPU_COLUMNS)) * 8

    def __str__(self) -> str:
        return f"{self.samples:,} samples x {self.cpus} CPUs" + (f" x {len(self.gpus)} GPUs" if self.gpus else "")


def decode(blob: bytes) -> SampleSeries:
    """The series :func:`encode` wrote; ValueError when the blob is not one. What the header
    declares is bounded first, and the payload is decompressed to its declared size at most: a
    131 KB frame that says 3 GiB is refused, not allocated."""
    head = header(blob)
    length = head["length"]
    n, cpus, gpus = int(head["count"]), int(head["cpus"]), len(head["gpu_index"])
    expected = 0
    for name, _, size in head["columns"]:
        width = cpus if name == "cpu_percent" else gpus if str(name).startswith("gpu.") else 1
        if not 0 <= int(size) <= n * width * 8 + (n * width + 7) // 8:
            raise ValueError(f"column {name!r} declares {size} bytes for {n * width} values")
        expected += int(size)
    parts, got = [], 0
    with _decompressor().stream_reader(io.BytesIO(blob[8 + length:])) as reader:
        while got <= expected and (part := reader.read(expected + 1 - got)):
            parts.append(part)
            got += len(part)
    payload = b"".join(parts)
    if len(payload) != expected:
        raise ValueError(f"the payload holds {'more' if len(payload) > expected else 'fewer'} bytes than "
                         "its header declares")
    out: dict[str, np.ndarray] = {}
    offset = 0
    for name, encoding, size in head["columns"]:
        width = cpus if name == "cpu_percent" else gpus if name.startswith("gpu.") else 1
        values = _decode(encoding, payload[offset:offset + size], n * width)
        out[name] = values.reshape((n, width), order="F") if name == "cpu_percent" or name.startswith("gpu.") \
            else values
        offset += size
    columns = {name: out[name] if name in out else np.full(n, np.nan) for name in SCALARS}
    gpu = {name: out.get(f"gpu.{name}", np.full((n, gpus), np.nan)) for name in GPU_COLUMNS}
    return SampleSeries(columns, out.get("cpu_percent", np.full((n, 0), np.nan)),
                        out.get("cpu_count", np.full(n, np.nan)), list(head["gpu_index"]), gpu,
                        list(head["gpu_names"]))


def split(series: SampleSeries, size: int = CHUNK_SAMPLES) -> list[tuple[float, float, int, int | None, bytes]]:
    """(first t, last t, count, RSS peak, blob) of each run of ``size`` samples."""
    out = []
    for first in range(0, len(series), size):
        part = series.take(slice(first, first + size))
        rss = part["rss_bytes"]
        out.append((float(part.t[0]), float(part.t[-1]), len(part),
                    int(np.nanmax(rss)) if np.any(~np.isnan(rss)) else None, encode(part)))
    return out
