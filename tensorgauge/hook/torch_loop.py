"""Custom training loops on PyTorch (plain, or a Keras model on Keras 3's torch backend): each
``torch.optim`` step is a step.

Keras' PyTorch guide trains its Keras model with ``loss.backward()`` and either a
``torch.optim`` optimizer's ``step()`` or a Keras optimizer's ``apply()`` (the
latter is a step already, as on every backend: :mod:`.train_loop`). A
``torch.optim`` step is seen through PyTorch's own global hook
(``register_optimizer_step_post_hook``): every optimizer, whatever its class.
Steps are timed end to end, like any custom loop's, and the time a step spent
in ``next()`` on a ``DataLoader`` is its wait for its batch. That wait is not
paired with ``next()`` on a cached batch (a ``DataLoader``'s own dispatch would
count as input), so the loop gets no input verdict, and ``show`` says so. A model
called under ``torch.no_grad()`` or with ``training=False`` between steps is an
evaluation pass (:mod:`.train_loop`). The loader's dataset and collate function are named and timed
on their own (:mod:`.loader_stages`).
"""

from __future__ import annotations

import functools
import sys
import time

from tensorgauge.hook import loader_stages, train_loop
from tensorgauge.hook.listeners import on_keras, on_torch
from tensorgauge.hook.wrapping import wrap_once

FEATURE = "torch_loop"  # the mark on its wrappers
_registered: list[object] = []  # the optimizer hook's handle, once per process


def after_optimizer_step(optimizer, args, kwargs) -> None:
    """PyTorch's post hook of every ``torch.optim`` step: a step of the job's own loop."""
    if train_loop._nested("update") or train_loop._in_keras_phase():
        return
    stepped = False
    try:
        train_loop._loop.train_step(None, eager=False)  # eager by design: no tf.function advice
        stepped = True
    except Exception:
        pass
    if stepped:
        train_loop._loop.after_step()  # may end the job (a --try-fixes window): outside the guard


def _wrap_next(original):
    """``next()`` on a ``DataLoader``'s iterator outside Keras: the time the loop waited for a batch."""
    @functools.wraps(original)
    def next_(self):
        if train_loop._nested("next") or train_loop._in_keras_phase():
            return original(self)
        began = time.monotonic()
        batch = original(self)  # StopIteration ends an epoch: nothing to time
        try:
            loop = train_loop._loop
            loop.on_next(self, began, time.monotonic() - began, loader="DataLoader")
            batch_size = getattr(getattr(self, "_index_sampler", None), "batch_size", None)
            if isinstance(batch_size, int):
                loop.batch_size = batch_size
            if loader_stages._loader.watching and loop.last_iterator == loop.train_iterator is not None:
                loader_stages._loader.watch(self)  # the training loader's dataset and collate, timed
        except Exception:
            pass
        return batch

    return next_


@on_torch
@on_keras
def _patch_torch(module) -> None:
    """PyTorch's optimizer hook and ``DataLoader`` iterator, once PyTorch has loaded: by itself (a plain
    PyTorch loop) or under Keras 3's torch backend."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    optimizer = sys.modules.get("torch.optim.optimizer")
    register = getattr(optimizer, "register_optimizer_step_post_hook", None)
    if register is not None and not _registered:
        _registered.append(register(after_optimizer_step))
    loader = sys.modules.get("torch.utils.data.dataloader")
    base = getattr(loader, "_BaseDataLoaderIter", None)
    if base is not None:
        wrap_once(base, "__next__", _wrap_next, by=FEATURE)
