"""Facts about what holds memory, sent as ``dataset`` events: the bytes materialised by
``Dataset.from_tensor_slices`` and shuffle buffer sizes (standard library only, in the job)."""

from __future__ import annotations

import functools
import sys

from tensorgauge.hook.channel import channel
from tensorgauge.hook.listeners import on_tensorflow
from tensorgauge.hook.protocol import Kind


def _nbytes(value) -> int:
    """Bytes of numpy arrays (or tuples/dicts/lists of them) given to from_tensor_slices."""
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (tuple, list)) and value and not isinstance(value[0], (int, float)):
        return sum(_nbytes(v) for v in value)
    return int(getattr(value, "nbytes", 0) or 0)


def patch_datasets(dataset_class) -> None:
    """Send the size of from_tensor_slices inputs and shuffle buffers (never changes them)."""
    original_slices = dataset_class.__dict__.get("from_tensor_slices")
    function = getattr(original_slices, "__func__", None)
    if function is not None and not getattr(function, "__tensorgauge_wrapped__", None):
        @functools.wraps(function)
        def from_tensor_slices(tensors, *args, **kwargs):
            dataset = function(tensors, *args, **kwargs)
            try:
                channel().emit(Kind.DATASET, op="from_tensor_slices", bytes=_nbytes(tensors),
                               elements=int(dataset.cardinality()))
            except Exception:
                pass
            return dataset

        from_tensor_slices.__tensorgauge_wrapped__ = function  # type: ignore[attr-defined]
        dataset_class.from_tensor_slices = staticmethod(from_tensor_slices)

    shuffle = dataset_class.__dict__.get("shuffle")
    if shuffle is not None and not getattr(shuffle, "__tensorgauge_wrapped__", None):
        @functools.wraps(shuffle)
        def shuffle_wrapper(self, buffer_size, *args, **kwargs):
            try:
                channel().emit(Kind.DATASET, op="shuffle", buffer_size=int(buffer_size),
                               elements=int(self.cardinality()))
            except Exception:
                pass
            return shuffle(self, buffer_size, *args, **kwargs)

        shuffle_wrapper.__tensorgauge_wrapped__ = shuffle  # type: ignore[attr-defined]
        dataset_class.shuffle = shuffle_wrapper


@on_tensorflow
def _patch(tf) -> None:
    dataset_module = sys.modules.get("tensorflow.python.data.ops.dataset_ops")
    dataset_class = getattr(dataset_module, "DatasetV2", None)
    if dataset_class is not None:
        patch_datasets(dataset_class)
