"""Facts about what holds memory, sent as ``dataset`` events: the bytes materialised by
``Dataset.from_tensor_slices``, and the buffers of ``shuffle``, ``prefetch`` with a set size and
``cache()`` in memory (their element's bytes from the element spec). Standard library only, in the job."""

from __future__ import annotations

import functools
import sys

from tensorgauge.hook.channel import channel, process_rss_bytes
from tensorgauge.hook.listeners import on_tensorflow
from tensorgauge.hook.protocol import Kind
from tensorgauge.hook.wrapping import wrap_once

FEATURE = "dataset_facts"  # the mark on its wrappers


def nbytes(value) -> int:
    """Bytes of numpy arrays (or tuples/dicts/lists of them) given to from_tensor_slices."""
    if isinstance(value, dict):
        return sum(nbytes(v) for v in value.values())
    if isinstance(value, (tuple, list)) and value and not isinstance(value[0], (int, float)):
        return sum(nbytes(v) for v in value)
    return int(getattr(value, "nbytes", 0) or 0)


def patch_datasets(dataset_class) -> None:
    """Send the size of from_tensor_slices inputs (and the RSS the call added: TensorFlow's copies
    of them) and of the buffers of shuffle, prefetch and cache (never changes them)."""
    def slices_facts(function):
        @functools.wraps(function)
        def from_tensor_slices(tensors, *args, **kwargs):
            before = process_rss_bytes()
            dataset = function(tensors, *args, **kwargs)
            try:
                after = process_rss_bytes()
                copied = max(0, after - before) if before is not None and after is not None else None
                channel().emit(Kind.DATASET, op="from_tensor_slices", bytes=nbytes(tensors),
                               elements=int(dataset.cardinality()), copied_bytes=copied)
            except Exception:
                pass
            return dataset

        return from_tensor_slices

    wrap_once(dataset_class, "from_tensor_slices", slices_facts, by=FEATURE)

    _wrap_buffer(dataset_class, "shuffle", _shuffle_facts)
    _wrap_buffer(dataset_class, "prefetch", _prefetch_facts)
    _wrap_buffer(dataset_class, "cache", _cache_facts)


def element_bytes(dataset, at_least: bool = False) -> int | None:
    """Bytes of one element of ``dataset``, from its element spec: None when a shape is not known, or with
    ``at_least``, the bytes of the parts whose shapes are known (keras' ``timeseries_dataset_from_array``
    zips a whole array, its shape known, with window indices of an open length)."""
    import tensorflow as tf

    total = 0
    for spec in tf.nest.flatten(dataset.element_spec):
        dims = spec.shape.as_list() if spec.shape.rank is not None else [None]
        if None in dims and at_least:
            continue
        if None in dims:
            return None
        count = 1
        for d in dims:
            count *= int(d or 0)
        total += count * spec.dtype.size
    return total


# Stages that pass their input's elements through unchanged: a shuffle over these, down to a
# from_tensor_slices, buffers slices of its tensors.
PASS_THROUGH = ("_ShuffleDataset", "_TakeDataset", "_SkipDataset", "_RepeatDataset", "_FilterDataset",
                "_ShardDataset", "_OptionsDataset", "_PrefetchDataset")
ALIGNMENT = 64  # TensorFlow shares a slice of a tensor (no copy) when its row is this aligned (Tensor::IsAligned)


def shared_bytes(dataset) -> int:
    """Bytes of one element that are slices of a from_tensor_slices tensor, shared rather than copied:
    TensorFlow's TensorSliceDataset copies a row only when it is not 64-byte aligned."""
    import tensorflow as tf

    stage = dataset
    while type(stage).__name__ in PASS_THROUGH:
        inputs = stage._inputs()
        stage = inputs[0] if len(inputs) == 1 else None
    if type(stage).__name__ != "_TensorSliceDataset":
        return 0
    shared = 0
    for spec in tf.nest.flatten(dataset.element_spec):
        dims = spec.shape.as_list() if spec.shape.rank is not None else [None]
        if None in dims:
            continue
        row = spec.dtype.size
        for d in dims:
            row *= int(d or 0)
        if row and row % ALIGNMENT == 0:
            shared += row
    return shared


def _holds(size: int | None, elements: int | None) -> int | None:
    return size * elements if size is not None and elements is not None and elements >= 0 else None


def _shuffle_facts(self, buffer_size, *args, **kwargs) -> dict:
    elements, size = int(self.cardinality()), element_bytes(self)
    held = min(int(buffer_size), elements) if elements >= 0 else int(buffer_size)
    shared = shared_bytes(self) if size is not None else 0
    return {"op": "shuffle", "buffer_size": int(buffer_size), "elements": elements, "element_bytes": size,
            "shared_bytes": shared, "holds_bytes": _holds(None if size is None else size - shared, held)}


def _prefetch_facts(self, buffer_size, *args, **kwargs) -> dict | None:
    if int(buffer_size) < 0:  # AUTOTUNE: the buffer is tf.data's to size
        return None
    size = element_bytes(self)
    return {"op": "prefetch", "buffer_size": int(buffer_size), "element_bytes": size,
            "holds_bytes": _holds(size, int(buffer_size))}


def _cache_facts(self, filename="", *args, **kwargs) -> dict | None:
    if filename:  # cached to files, not memory
        return None
    elements, size = int(self.cardinality()), element_bytes(self)
    return {"op": "cache", "elements": elements, "element_bytes": size, "holds_bytes": _holds(size, elements)}


def _wrap_buffer(dataset_class, name: str, facts) -> None:
    """Send ``facts(self, *args)`` when the pipeline stage ``name`` is added (never changes it)."""

    def told(original):
        @functools.wraps(original)
        def wrapper(self, *args, **kwargs):
            try:
                payload = facts(self, *args, **kwargs)
                if payload is not None:
                    channel().emit(Kind.DATASET, **payload)
            except Exception:
                pass
            return original(self, *args, **kwargs)

        return wrapper

    wrap_once(dataset_class, name, told, by=FEATURE)


def dataset_class():
    """tf.data's ``DatasetV2``, where TensorFlow has loaded it (None elsewhere)."""
    return getattr(sys.modules.get("tensorflow.python.data.ops.dataset_ops"), "DatasetV2", None)


@on_tensorflow
def _patch(tf) -> None:
    if dataset_class() is not None:
        patch_datasets(dataset_class())
