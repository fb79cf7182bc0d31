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
"""

from __future__ import annotations

import os
import stat
import sys

from tensorgauge.hook.channel import channel
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit, on_tensorflow
from tensorgauge.hook.protocol import BUDGET_EXIT_CODE, CHECKPOINT_ENV, GPU_MEMORY_ENV, STOP_FILE_ENV, Kind


class _State:
    stopping = False


state = _State()


def stop_requested() -> bool:
    """The monitor asked for a stop: a regular file of this user's, in a directory only
    this user may enter (the monitor's private one). Anything else is not trusted."""
    path = os.environ.get(STOP_FILE_ENV)
    if not path:
        return False
    try:
        stop, folder = os.lstat(path), os.lstat(os.path.dirname(path) or ".")
    except OSError:
        return False
    uid = os.getuid()
    return (stat.S_ISREG(stop.st_mode) and stop.st_uid == uid and stat.S_ISDIR(folder.st_mode)
            and folder.st_uid == uid and folder.st_mode & 0o077 == 0)


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
        from tensorgauge.hook.exit import exit_job

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


class _StopWatch(FitListener):
    """Stops training at a batch boundary once the monitor asks; ends the job after fit."""

    def __init__(self, callbacks, keras_callbacks):
        self.callbacks, self.keras_callbacks = callbacks, keras_callbacks

    def on_train_batch_begin(self, model, epoch: int) -> None:
        if stop_requested():
            stop_training(model, self.callbacks, self.keras_callbacks, epoch)

    def after_fit(self, model) -> None:
        exit_if_stopped()


@on_fit
def _budget_listener(call: FitCall) -> FitListener | None:
    callbacks = call.callbacks
    if callbacks is not None and not any(type(cb).__name__ == "BackupAndRestore" for cb in callbacks):
        backup = restore_callback(call.keras_callbacks, call.model)
        if backup is not None:
            callbacks.insert(0, backup)  # restore before the job's own callbacks look
    if not os.environ.get(STOP_FILE_ENV):
        return None
    return _StopWatch(callbacks, call.keras_callbacks)


on_tensorflow(apply_gpu_memory_limit)
