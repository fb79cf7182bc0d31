"""Where a budget stop's checkpoint lives, and how a resumed fit continues from it
(standard library only, inside the job).

The user's ``--checkpoint DIR`` (or the default folder beside the store) is never
written into directly: the tool makes its own subfolder :data:`SUBFOLDER` and keeps
Keras' weights, Keras' training metadata and its own note (:data:`NOTE`) there.
Once the resumed fit completes, the tool removes those files, and the subfolder if
nothing else is in it: nothing the user put in ``DIR`` is ever touched.

Keras' ``BackupAndRestore`` restores the weights and the epoch only. The note adds
the steps of the interrupted epoch that the checkpoint holds, so the resumed fit
trains only the steps that epoch had left (when its steps per epoch are known),
and says so; else it redoes the epoch and says that.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from tensorgauge.hook.diagnose import steps_per_call
from tensorgauge.hook.protocol import CHECKPOINT_ENV

SUBFOLDER = "tensorgauge-resume"
NOTE = "tensorgauge-resume.json"
# What Keras' BackupAndRestore writes (with its double-checkpoint copies): the only files removed.
KERAS_FILES = ("latest.weights.h5", "training_metadata.json", "latest.weights.h5.bkp", "training_metadata.json.bkp")


def folder() -> str | None:
    """The tool's own checkpoint folder inside the user's, or None without a budget."""
    user = os.environ.get(CHECKPOINT_ENV)
    return os.path.join(user, SUBFOLDER) if user else None


@dataclass
class Resume:
    """Where a stopped fit was: the ``fit`` call of the process (0 = the first), the epoch
    (0-based) and the steps of that epoch already in the checkpoint's weights."""

    fit: int
    epoch: int
    steps_done: int
    own_weights: bool = True  # False: the weights are in the job's own BackupAndRestore folder

    def save(self, path: str) -> None:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.__dict__, f)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> Resume | None:
        try:
            with open(path) as f:
                data = json.load(f)
            return cls(int(data["fit"]), int(data["epoch"]), int(data["steps_done"]), bool(data.get("own_weights", True)))
        except (OSError, ValueError, KeyError, TypeError):
            return None


def note_path() -> str | None:
    own = folder()
    return os.path.join(own, NOTE) if own else None


def pending() -> Resume | None:
    """The stop this run resumes from, if the tool's folder holds one."""
    path = note_path()
    return Resume.load(path) if path else None


def remove_own_files() -> None:
    """After the resumed training completed: the files the tool and Keras wrote, then the
    subfolder if it is empty. Never a file or folder of the user's."""
    own = folder()
    if not own or os.path.islink(own):
        return
    for name in (NOTE, *KERAS_FILES):
        try:
            os.unlink(os.path.join(own, name))
        except OSError:
            pass
    try:
        os.rmdir(own)
    except OSError:  # not empty (someone else's file) or gone: leave it
        pass


def describe(resume: Resume, steps_per_epoch: int | None) -> str:
    where = f"epoch {resume.epoch + 1}"
    if steps_per_epoch and 0 < resume.steps_done < steps_per_epoch:
        return f"{where}, from step {resume.steps_done + 1} of {steps_per_epoch}"
    if resume.steps_done == 0:
        return f"{where}, from its start"
    return f"{where}, from its start again (its steps per epoch are unknown)"


def resume_class(keras_callbacks):
    """A ``BackupAndRestore`` that restores a budget stop's checkpoint (unless the job's own
    callback does) and ends the interrupted epoch after the steps it had left. It saves nothing
    at epoch ends and deletes nothing: the budget stop saves, :func:`remove_own_files` cleans."""
    base = keras_callbacks.BackupAndRestore

    class TensorgaugeResume(base):  # type: ignore[valid-type,misc]
        def __init__(self, resume: Resume, backup_dir: str, load: bool, report):
            super().__init__(backup_dir, delete_checkpoint=False)
            self.resume, self._load, self._report = resume, load, report
            self._left: int | None = None  # steps the interrupted epoch has left, while it runs
            self._steps: int | None = None  # steps per epoch, when Keras knows them
            self._cut = False

        def on_train_begin(self, logs=None):
            if self._load:
                super().on_train_begin(logs)
            steps = (self.params or {}).get("steps")
            self._steps = steps if isinstance(steps, int) and steps > 0 else None
            self._report(self.resume, self._steps)

        def on_epoch_begin(self, epoch, logs=None):
            done, steps = self.resume.steps_done, self._steps
            self._left = None
            if epoch == self.resume.epoch and steps is not None and 0 < done < steps:
                self._left = steps - done

        def on_train_batch_begin(self, batch, logs=None):
            if self._left is not None and batch + (steps_per_call(self.model) or 1) >= self._left:
                self._left = None
                self._cut = self.model.stop_training is not True
                self.model.stop_training = True  # this call trains the epoch's last steps

        def on_train_batch_end(self, batch, logs=None):
            pass

        def on_epoch_end(self, epoch, logs=None):
            if self._cut:  # first in the list: a callback after this one may still stop training
                self._cut = False
                self.model.stop_training = False

        def on_train_end(self, logs=None):
            pass

    return TensorgaugeResume


def print_resumed(resume: Resume, steps_per_epoch: int | None) -> None:
    print(f"tensorgauge: resuming from the budget stop's checkpoint: {describe(resume, steps_per_epoch)}",
          file=sys.stderr)
