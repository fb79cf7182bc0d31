"""The job's side of a budget (standard library only, inside the job).

- A graceful stop: the monitor creates the file named by ``$TENSORGAUGE_STOP_FILE``
  when the job nears its memory budget. At the next training batch the hook
  writes a resumable checkpoint with Keras' own ``BackupAndRestore`` (into
  ``$TENSORGAUGE_CHECKPOINT_DIR``), stops training, and once ``fit`` returns
  the job exits with :data:`BUDGET_EXIT_CODE`. Running the same command with
  the same checkpoint folder resumes: ``BackupAndRestore`` restores the
  weights and the epoch.
- GPU memory: ``$TENSORGAUGE_GPU_MEMORY_LIMIT`` (bytes) becomes a logical
  device ``memory_limit`` on each GPU, set right after TensorFlow is imported,
  before anything can initialise a GPU.
- Facts about what holds memory: bytes materialised by
  ``Dataset.from_tensor_slices`` and shuffle buffer sizes, sent as events.
"""

from __future__ import annotations

import functools
import os
import sys

from tensorgauge.hook.channel import channel
from tensorgauge.hook.protocol import Kind

from tensorgauge.hook.protocol import CHECKPOINT_ENV, GPU_MEMORY_ENV, STOP_FILE_ENV

BUDGET_EXIT_CODE = 75  # EX_TEMPFAIL: stopped by the budget, run again to resume


class _State:
    stopping = False


state = _State()


def stop_requested() -> bool:
    path = os.environ.get(STOP_FILE_ENV)
    return bool(path) and os.path.exists(path)


def _checkpoint_folder() -> str | None:
    return os.environ.get(CHECKPOINT_ENV) or None


def restore_callback(keras_callbacks, model):
    """A BackupAndRestore that resumes from a budget stop's checkpoint, if one is there.

    Only when a checkpoint exists: a fresh run gets no callback (and no cost).
    Keras restores the weights and the epoch, and deletes the checkpoint once
    training completes. None without a checkpoint or an unbuilt model (Keras requires it).
    """
    folder = _checkpoint_folder()
    backup_class = getattr(keras_callbacks, "BackupAndRestore", None)
    if not folder or backup_class is None or not getattr(model, "built", False):
        return None
    try:
        if not any(os.scandir(folder)):
            return None
    except OSError:
        return None
    channel().emit(Kind.BUDGET_RESUME, checkpoint=folder)
    return backup_class(folder)


def stop_training(model, callbacks, keras_callbacks, epoch: int) -> None:
    """Checkpoint as BackupAndRestore does, and stop: at a batch boundary once the monitor asked."""
    if state.stopping:
        return
    state.stopping = True
    checkpoint = None
    folder = _checkpoint_folder()
    backups = [cb for cb in callbacks or [] if type(cb).__name__ == "BackupAndRestore"]
    backup_class = getattr(keras_callbacks, "BackupAndRestore", None)
    try:
        if backups:
            backup = backups[0]
        elif folder and backup_class is not None:
            backup = backup_class(folder, delete_checkpoint=False)
            backup.set_model(model)
        else:
            backup = None
        if backup is not None:
            backup._current_epoch = epoch  # resume re-runs the interrupted epoch from these weights
            backup._save_model()
            backup.delete_checkpoint = False  # fit's on_train_end must keep it
            checkpoint = backup.backup_dir
    except Exception as exc:  # a full disk: stop anyway
        channel().emit(Kind.BUDGET_CHECKPOINT_FAILED, error=f"{type(exc).__name__}: {exc}")
    channel().emit(Kind.BUDGET_STOP, checkpoint=checkpoint, epoch=epoch)
    model.stop_training = True


def exit_if_stopped() -> None:
    """After ``fit`` returns: leave the job with the budget's exit code."""
    if state.stopping:
        print("tensorgauge: training stopped to stay inside the memory budget; run the same "
              "command again to resume from the checkpoint", file=sys.stderr)
        from tensorgauge.hook import exit_job

        exit_job(BUDGET_EXIT_CODE)


def apply_gpu_memory_limit(tf) -> None:
    limit = os.environ.get(GPU_MEMORY_ENV)
    if not limit:
        return
    applied, error = 0, None
    try:
        megabytes = max(1, int(limit) // (1 << 20))
        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.set_logical_device_configuration(
                gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=megabytes)])
            applied += 1
    except Exception as exc:  # GPUs already initialised by the job
        error = f"{type(exc).__name__}: {exc}"
    channel().emit(Kind.BUDGET_GPU_MEMORY, limit_bytes=int(limit), gpus=applied, error=error)


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

        from_tensor_slices.__tensorgauge_wrapped__ = function
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

        shuffle_wrapper.__tensorgauge_wrapped__ = shuffle
        dataset_class.shuffle = shuffle_wrapper
