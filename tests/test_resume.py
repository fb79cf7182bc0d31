"""A budget stop's checkpoint folder and the resumed fit's steps, on stand-ins for Keras
(the real fit: tests/test_tf_budget.py)."""

import sys
import types

import pytest

from tensorgauge.hook import budget, resume
from tensorgauge.hook.protocol import CHECKPOINT_ENV


class FakeBackup:
    """Keras 3's BackupAndRestore, as far as the hook uses it."""

    def __init__(self, backup_dir, delete_checkpoint=True):
        self.backup_dir, self.delete_checkpoint, self.save_freq = backup_dir, delete_checkpoint, "epoch"
        self.saved, self.loaded, self.params, self.model = [], 0, {}, None

    def set_model(self, model):
        self.model = model

    def _save_model(self):
        self.saved.append((self._current_epoch, self._last_batch_seen))

    def on_train_begin(self, logs=None):
        self.loaded += 1


class BackupAndRestore(FakeBackup):  # the job's own, by its class name
    pass


class Model:
    built = True
    stop_training = False
    steps_per_execution = 1


keras_callbacks = types.SimpleNamespace(BackupAndRestore=FakeBackup)


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "my_best.weights.h5").write_text("mine")
    monkeypatch.setenv(CHECKPOINT_ENV, str(folder))
    monkeypatch.setattr(budget, "state", budget._State())
    monkeypatch.setattr(budget, "channel", lambda: types.SimpleNamespace(emit=lambda kind, **data: None))
    return folder


def test_a_stop_writes_into_the_tools_subfolder_and_notes_the_steps(user_folder):
    budget.state.fits = 1
    model = Model()
    budget.stop_training(model, [], keras_callbacks, epoch=2, batch=41)
    own = user_folder / resume.SUBFOLDER
    assert model.stop_training and own.is_dir() and (own.stat().st_mode & 0o077) == 0
    assert resume.pending() == resume.Resume(fit=0, epoch=2, steps_done=41, own_weights=True)


def test_a_stop_with_the_jobs_own_backup_keeps_its_epoch_end_from_marking_the_epoch_done(user_folder):
    budget.state.fits = 1
    job_backup = BackupAndRestore("/their/folder")
    budget.stop_training(Model(), [job_backup], keras_callbacks, epoch=1, batch=5)
    assert job_backup.saved == [(1, 5)] and job_backup.delete_checkpoint is False
    assert job_backup.save_freq == sys.maxsize  # no save at the epoch end that follows the stop
    assert resume.pending().own_weights is False


def test_a_stop_inside_a_resumed_epoch_counts_the_steps_trained_before_it(user_folder):
    budget.state.fits = 1
    budget.state.resumed = resume.Resume(fit=0, epoch=3, steps_done=30)
    budget.stop_training(Model(), [], keras_callbacks, epoch=3, batch=20)
    assert resume.pending().steps_done == 50


def run_epochs(callback, model, epochs, steps, stop_by_other=None):
    """Keras' loop: the steps each epoch trained, as (epoch, batch)."""
    trained = []
    callback.on_train_begin()
    for epoch in range(callback.resume.epoch, epochs):
        callback.on_epoch_begin(epoch)
        for batch in range(steps):
            callback.on_train_batch_begin(batch)
            trained.append((epoch, batch))
            if model.stop_training:
                break
        callback.on_epoch_end(epoch)  # first in the list
        if stop_by_other == epoch:
            model.stop_training = True  # EarlyStopping, later in the list
        if model.stop_training:
            break
    return trained


def test_the_resumed_fit_trains_only_the_steps_its_epoch_had_left():
    told = []
    model = Model()
    callback = resume.resume_class(keras_callbacks)(resume.Resume(0, 1, 40), "/x", True, lambda *a: told.append(a))
    callback.set_model(model)
    callback.params = {"steps": 100}
    trained = run_epochs(callback, model, epochs=3, steps=100)
    assert trained == [(1, b) for b in range(60)] + [(2, b) for b in range(100)]
    assert callback.loaded == 1 and told == [(callback.resume, 100)]
    assert resume.describe(callback.resume, 100) == "epoch 2, from step 41 of 100"


def test_a_stop_asked_by_another_callback_in_the_cut_epoch_still_stops():
    model = Model()
    callback = resume.resume_class(keras_callbacks)(resume.Resume(0, 0, 90), "/x", False, lambda *a: None)
    callback.set_model(model)
    callback.params = {"steps": 100}
    trained = run_epochs(callback, model, epochs=3, steps=100, stop_by_other=0)
    assert trained == [(0, b) for b in range(10)] and model.stop_training
    assert callback.loaded == 0  # the job's own BackupAndRestore restores


def test_unknown_steps_per_epoch_redo_the_epoch_and_say_so():
    model = Model()
    callback = resume.resume_class(keras_callbacks)(resume.Resume(0, 0, 7), "/x", True, lambda *a: None)
    callback.set_model(model)
    callback.params = {"steps": None}
    assert len(run_epochs(callback, model, epochs=1, steps=12)) == 12
    assert resume.describe(callback.resume, None) == "epoch 1, from its start again (its steps per epoch are unknown)"


def fit_finishing(model, epochs, steps, callbacks, first_epoch=0):
    """Keras' fit over callbacks with Keras' methods, in their order: the batches it finished, as (epoch,
    batch). A call that began trains and ends before ``stop_training`` is looked at."""
    finished = []
    for callback in callbacks:
        callback.on_train_begin()
    for epoch in range(first_epoch, epochs):
        for callback in callbacks:
            callback.on_epoch_begin(epoch)
        for batch in range(steps):
            for callback in callbacks:
                callback.on_train_batch_begin(batch)
            finished.append((epoch, batch))
            if model.stop_training:
                break
        for callback in callbacks:
            callback.on_epoch_end(epoch)
        if model.stop_training:
            break
    for callback in callbacks:
        callback.on_train_end()
    return finished


class ToolCallback:
    """The tool's Keras callback as far as the budget's listener sees it (hook.patches)."""

    def __init__(self, listener, model, steps):
        self.listener, self.model, self.steps, self.epoch = listener, model, steps, 0

    def on_train_begin(self):
        self.listener.on_train_begin(self.model, self.steps)

    def on_epoch_begin(self, epoch):
        self.epoch = epoch

    def on_train_batch_begin(self, batch):
        self.listener.on_train_batch_begin(self.model, self.epoch, batch)

    def on_epoch_end(self, epoch):
        pass

    def on_train_end(self):
        self.listener.on_train_end(self.model)


@pytest.mark.parametrize("stop_at", [(2, 69), (2, 99), (0, 0)])
def test_a_stopped_fit_and_its_resume_finish_each_batch_once(user_folder, monkeypatch, stop_at):
    """The stop comes as a batch begins and Keras still trains that batch: the checkpoint saved at the
    training's end holds it, and the resumed fit trains only the batches after it (the next epoch's
    when it was its epoch's last) — together every batch of 5 epochs of 100, none twice."""
    epochs, steps, begun = 5, 100, []
    monkeypatch.setattr(budget, "stop_requested", lambda: len(begun) == stop_at[0] * steps + stop_at[1] + 1)
    budget.state.fits = 1
    model = Model()
    watch = budget._StopWatch([], keras_callbacks, resumed=False)
    tool = ToolCallback(watch, model, steps)
    counting = types.SimpleNamespace(on_train_begin=lambda: None, on_epoch_begin=lambda epoch: None,
                                     on_train_batch_begin=lambda batch: begun.append(batch),
                                     on_epoch_end=lambda epoch: None, on_train_end=lambda: None)
    stopped = fit_finishing(model, epochs, steps, [counting, tool])  # the job's callbacks first, the tool's last
    assert stopped[-1] == stop_at
    note = resume.pending()
    callback = resume.resume_class(keras_callbacks)(note, "/x", True, lambda *a: None)
    resumed_model = Model()
    callback.set_model(resumed_model)
    callback.params = {"steps": steps}
    resumed = fit_finishing(resumed_model, epochs, steps, [callback], first_epoch=note.epoch)
    assert stopped + [(e, b + (note.steps_done if e == note.epoch else 0)) for e, b in resumed] == [
        (e, b) for e in range(epochs) for b in range(steps)]


def test_cleaning_up_removes_only_the_tools_files(user_folder):
    own = user_folder / resume.SUBFOLDER
    own.mkdir()
    for name in (resume.NOTE, *resume.KERAS_FILES):
        (own / name).write_text("")
    resume.remove_own_files()
    assert sorted(p.name for p in user_folder.iterdir()) == ["my_best.weights.h5"]
    own.mkdir()
    (own / resume.NOTE).write_text("")
    (own / "theirs.txt").write_text("")  # someone put a file of theirs in the tool's folder: it stays
    resume.remove_own_files()
    assert sorted(p.name for p in own.iterdir()) == ["theirs.txt"]


def test_a_damaged_note_is_no_resume(user_folder):
    own = user_folder / resume.SUBFOLDER
    own.mkdir()
    (own / resume.NOTE).write_text("{not json")
    assert resume.pending() is None
