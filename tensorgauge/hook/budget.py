"""The job's side of a budget (standard library only, inside the job).

- A graceful stop: the monitor creates the file named by ``$TENSORGAUGE_STOP_FILE``
  when the job nears its memory budget. At the next training batch the hook
  writes a resumable checkpoint with Keras' own ``BackupAndRestore`` (into the
  job's own one, else the tool's subfolder of ``$TENSORGAUGE_CHECKPOINT_DIR``),
  stops training, and once ``fit`` returns the job exits with
  :data:`BUDGET_EXIT_CODE`. Running the same command with the same checkpoint
  folder resumes at the step it stopped at (:mod:`.resume`).
- GPU memory: ``$TENSORGAUGE_GPU_MEMORY_LIMIT`` (bytes) becomes a logical
  device ``memory_limit`` on each GPU, set right after TensorFlow is imported,
  before anything can initialise a GPU.
"""

from __future__ import annotations

import os
import stat
import sys

from tensorgauge.hook import resume
from tensorgauge.hook.channel import channel
from tensorgauge.hook.diagnose import steps_per_call
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit, on_tensorflow
from tensorgauge.hook.protocol import BUDGET_EXIT_CODE, GPU_MEMORY_ENV, STOP_FILE_ENV, Kind, error_text


class _State:
    stopping = False
    fits = 0  # fit calls so far in this process
    resumed: resume.Resume | None = None  # the stop the running fit resumed from
    # Where the stopped fit is once the call that was beginning at the stop has trained: (epoch, steps done)
    stopped_at: tuple[int, int] | None = None


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


def _job_backup(callbacks):
    """The job's own ``BackupAndRestore`` (not ours), if it passed one to fit."""
    return next((cb for cb in callbacks or [] if type(cb).__name__ == "BackupAndRestore"), None)


def stop_training(model, callbacks, keras_callbacks, epoch: int, batch: int,
                  steps_per_epoch: int | None = None) -> None:
    """Checkpoint as BackupAndRestore does, and stop: at a batch's begin once the monitor asked.

    The weights saved now hold ``batch`` steps of ``epoch`` (more when this fit resumed inside
    that epoch): a job that dies before fit's end resumes from them. Keras still trains the call
    that is beginning; :func:`checkpoint_stopped`, at the training's end, saves again with its
    steps in, so that the resumed fit trains only the rest (:mod:`.resume`)."""
    if state.stopping:
        return
    state.stopping = True
    steps_done = batch
    if state.resumed is not None and state.resumed.epoch == epoch:
        steps_done += state.resumed.steps_done  # the resumed epoch counts its steps from 0 again
    checkpoint = _checkpoint(model, callbacks, keras_callbacks, epoch, steps_done)
    channel().emit(Kind.BUDGET_STOP, checkpoint=checkpoint, epoch=epoch, step=steps_done)
    model.stop_training = True
    if checkpoint is not None:
        state.stopped_at = _after_call(epoch, steps_done + (steps_per_call(model) or 1), steps_per_epoch)


def _after_call(epoch: int, steps_done: int, steps_per_epoch: int | None) -> tuple[int, int]:
    """Where training stands with ``steps_done`` steps of ``epoch`` trained: the next epoch's start once
    they are all of its steps."""
    if steps_per_epoch and steps_done >= steps_per_epoch:
        return epoch + 1, 0
    return epoch, steps_done


def checkpoint_stopped(model, callbacks, keras_callbacks) -> None:
    """At the stopped fit's training end: the checkpoint saved again, now that the call that was
    beginning at the stop has trained (the weights hold its steps), and the stop told with them."""
    if state.stopped_at is None:
        return
    (epoch, steps_done), state.stopped_at = state.stopped_at, None
    checkpoint = _checkpoint(model, callbacks, keras_callbacks, epoch, steps_done)
    if checkpoint is not None:
        channel().emit(Kind.BUDGET_STOP, checkpoint=checkpoint, epoch=epoch, step=steps_done)


def _checkpoint(model, callbacks, keras_callbacks, epoch: int, steps_done: int) -> str | None:
    """The weights saved with BackupAndRestore (the job's own, else one of the tool's subfolder) as
    ``steps_done`` steps into ``epoch``, and the note that says so; the folder, or None (nothing to save
    with, or the save failed: told)."""
    own = resume.folder()
    job_backup = _job_backup(callbacks)
    backup_class = getattr(keras_callbacks, "BackupAndRestore", None)
    try:
        if job_backup is not None:
            backup = job_backup
        elif own and backup_class is not None:
            os.makedirs(own, mode=0o700, exist_ok=True)
            backup = backup_class(own, delete_checkpoint=False)
            backup.set_model(model)
        else:
            return None
        backup._current_epoch, backup._last_batch_seen = epoch, steps_done
        backup._save_model()
        backup.delete_checkpoint = False  # fit's on_train_end must keep it
        backup.save_freq = sys.maxsize  # and its epoch end must not mark the interrupted epoch done
        note = resume.note_path()
        if note:
            os.makedirs(os.path.dirname(note), mode=0o700, exist_ok=True)
            resume.Resume(state.fits - 1, epoch, steps_done, own_weights=job_backup is None).save(note)
        return backup.backup_dir
    except Exception as exc:  # a full disk: stop anyway
        channel().emit(Kind.BUDGET_CHECKPOINT_FAILED, error=error_text(exc))
        return None


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
    """Stops training at a batch boundary once the monitor asks; ends the job after fit,
    or, after a resumed fit completed, removes the tool's checkpoint files."""

    def __init__(self, callbacks, keras_callbacks, resumed: bool):
        self.callbacks, self.keras_callbacks, self.resumed = callbacks, keras_callbacks, resumed
        self.steps_per_epoch: int | None = None

    def on_train_begin(self, model, steps_per_epoch: int | None) -> None:
        self.steps_per_epoch = steps_per_epoch

    def on_train_batch_begin(self, model, epoch: int, batch: int) -> None:
        if stop_requested():
            stop_training(model, self.callbacks, self.keras_callbacks, epoch, batch, self.steps_per_epoch)

    def on_train_end(self, model) -> None:
        checkpoint_stopped(model, self.callbacks, self.keras_callbacks)

    def after_fit(self, model) -> None:
        exit_if_stopped()
        if self.resumed:
            resume.remove_own_files()
            state.resumed = None


def _report_resume(stop: resume.Resume, steps_per_epoch: int | None) -> None:
    resume.print_resumed(stop, steps_per_epoch)
    channel().emit(Kind.BUDGET_RESUME, checkpoint=resume.folder(), epoch=stop.epoch, step=stop.steps_done,
                   steps=steps_per_epoch, text=resume.describe(stop, steps_per_epoch))


def _add_resume(call: FitCall, fit_index: int) -> bool:
    """Put a resume callback first in this fit's list when a budget stop left a checkpoint of it."""
    stop = resume.pending()
    base = getattr(call.keras_callbacks, "BackupAndRestore", None)
    if stop is None or stop.fit != fit_index or call.callbacks is None or base is None:
        return False
    if not getattr(call.model, "built", False):  # Keras' BackupAndRestore requires a built model
        return False
    job_backup = _job_backup(call.callbacks)
    if not stop.own_weights and job_backup is None:  # the weights were in a folder this fit no longer names
        return False
    callback_class = resume.resume_class(call.keras_callbacks)
    call.callbacks.insert(0, callback_class(stop, resume.folder(), stop.own_weights, _report_resume))
    state.resumed = stop
    return True


@on_fit
def _budget_listener(call: FitCall) -> FitListener | None:
    state.fits += 1
    resumed = _add_resume(call, state.fits - 1)
    if not os.environ.get(STOP_FILE_ENV):
        return None
    return _StopWatch(call.callbacks, call.keras_callbacks, resumed)


on_tensorflow(apply_gpu_memory_limit)
