"""Where the job's own code builds its input and configures its training, as file:line: what
``tensorgauge fix`` edits.

- Every ``tf.data.Dataset`` stage the job's code makes itself (``ds.map(...)`` written in its own file, not
  called by Keras or tf.data) carries the call's site; when a fit or a custom loop starts, its pipeline is
  sent source first, each stage with its site, whether it is random, calls Python or runs in parallel, and
  the caller of the function that made it (a helper that builds two pipelines is then seen as such).
- ``Model.compile``, ``Model.predict`` and an eager ``GradientTape.gradient`` send their caller's site once.

A site is a user's file (not the standard library, an installed package or tensorgauge) and a line; each
file named is sent with its SHA-256, so a patch can tell the code changed since the run. Standard library
only; nothing here changes what a call does or returns.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from types import FrameType

from tensorgauge.hook.channel import channel
from tensorgauge.hook.diagnose import _library_folders
from tensorgauge.hook.listeners import FitCall, FitListener, on_fit, on_keras, on_tensorflow, on_torch
from tensorgauge.hook.protocol import Kind
from tensorgauge.hook.wrapping import wrap_once

FEATURE = "call_sites"  # the mark on its wrappers
SITE_ATTRIBUTE = "_tensorgauge_site"  # on a dataset the job's code made: (path, line, caller or None, method)
MADE_IN_ATTRIBUTE = "_tensorgauge_made_in"  # on one a library made: (path, line, the library function the job called)
DATASET_METHODS = ("map", "batch", "padded_batch", "prefetch", "cache", "shuffle", "repeat", "filter",
                   "interleave", "unbatch", "take", "flat_map", "rebatch")
DATASET_SOURCES = ("from_tensor_slices", "from_tensors", "from_generator", "range", "zip", "list_files")
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the tensorgauge package
_sent: set = set()  # (what, path, line) already sent
_hashes: dict[str, str | None] = {}
_site_calls: dict[tuple, dict] = {}  # (path, line, method) of a dataset call -> {"calls", "callers"}


def is_user_file(path: str) -> bool:
    """Code the user wrote: a real file outside the standard library, installed packages and tensorgauge."""
    if not path or path.startswith("<") or not os.path.isfile(path):
        return False
    real = os.path.realpath(path)
    return not real.startswith(_library_folders()) and not real.startswith(_HERE) \
        and "__autograph_generated_file" not in real


def _outside_us(frame: FrameType | None) -> FrameType | None:
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_HERE):
        frame = frame.f_back
    return frame


def direct_caller(depth: int = 2) -> tuple[str, int, str | None] | None:
    """(path, line, the caller's caller) of the code that called the wrapped function, when that is the
    user's (None when a library called it: Keras building its own pipeline). The caller's caller: "path:line"
    of the user's code that called the function holding the call, "library" where a library called it,
    None where the call is in a module's top level."""
    frame = _outside_us(sys._getframe(depth))
    if frame is None or not is_user_file(frame.f_code.co_filename):
        return None
    path = os.path.abspath(frame.f_code.co_filename)
    above = _outside_us(frame.f_back) if frame.f_code.co_name != "<module>" else None
    caller = None
    if above is not None and is_user_file(above.f_code.co_filename):
        caller = f"{os.path.abspath(above.f_code.co_filename)}:{above.f_lineno}"
    elif above is not None:
        caller = "library"
    return path, frame.f_lineno, caller


def library_call(depth: int = 2) -> tuple[str, int, str] | None:
    """(path, line, name) of the job's call of the library function that is making a dataset now (keras'
    ``timeseries_dataset_from_array``), from the user's frame nearest the top and the frame it called."""
    frame: FrameType | None = sys._getframe(depth)
    below = None
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            if below is None:
                return None
            return os.path.abspath(frame.f_code.co_filename), frame.f_lineno, below.f_code.co_name
        if not os.path.abspath(frame.f_code.co_filename).startswith(_HERE):
            below = frame
        frame = frame.f_back
    return None


def first_user_frame(depth: int = 2) -> tuple[str, int] | None:
    """(path, line) of the innermost frame of the user's own code on the stack (who called ``fit``)."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return os.path.abspath(frame.f_code.co_filename), frame.f_lineno
        frame = frame.f_back
    return None


def file_sha256(path: str) -> str | None:
    if path not in _hashes:
        try:
            with open(path, "rb") as f:
                _hashes[path] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            _hashes[path] = None
    return _hashes[path]


def _files(*paths: str | None) -> dict[str, str | None]:
    return {p: file_sha256(p) for p in paths if p}


def _tag(made, site: tuple[str, int, str | None], method: str) -> None:
    try:
        setattr(made, SITE_ATTRIBUTE, (*site, method))
    except Exception:  # a dataset that takes no attribute: its stage has no site
        pass
    record = _site_calls.setdefault((site[0], site[1], method), {"calls": 0, "callers": set()})
    record["calls"] += 1
    if site[2]:
        record["callers"].add(site[2])


def _sited(method: str):
    def wrap(original):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            made = original(*args, **kwargs)
            try:
                site = direct_caller()
                if site is not None:
                    _tag(made, site, method)
                elif getattr(made, MADE_IN_ATTRIBUTE, None) is None:
                    setattr(made, MADE_IN_ATTRIBUTE, library_call())
            except Exception:
                pass
            return made

        return wrapper

    return wrap


def patch_datasets(dataset_class) -> None:
    for name in (*DATASET_METHODS, *DATASET_SOURCES):
        wrap_once(dataset_class, name, _sited(name), by=FEATURE)


def _stage_facts(stage) -> dict:
    from tensorgauge.hook.dataset_facts import element_bytes
    from tensorgauge.hook.stage_names import describe

    facts = describe(stage)
    site = getattr(stage, SITE_ATTRIBUTE, None)
    if site is not None:
        record = _site_calls.get((site[0], site[1], site[3]), {})
        facts.update(site=f"{site[0]}:{site[1]}", method=site[3], calls=record.get("calls", 1),
                     callers=sorted(record.get("callers", ())))
    made_in = getattr(stage, MADE_IN_ATTRIBUTE, None) if site is None else None
    if made_in is not None:
        facts.update(made_in=f"{made_in[0]}:{made_in[1]}", made_by=made_in[2])
    for key, attribute in (("deterministic", "_deterministic"), ("buffer_size", "_buffer_size")):
        value = getattr(stage, attribute, None)
        if isinstance(value, (bool, int, str)):
            facts[key] = value
    try:
        facts["elements"] = int(stage.cardinality())
        facts["element_bytes"] = element_bytes(stage)
    except Exception:
        pass
    return facts


def pipeline(dataset) -> list[dict]:
    """The stages of ``dataset`` along their first inputs, source first, with their sites."""
    from tensorgauge.hook.stage_names import chain

    return [_stage_facts(stage) for stage in chain(dataset)]


def send_pipeline(dataset, consumer: str, model=None) -> None:
    """Send the pipeline a fit or custom loop (``consumer``) reads, once per consumer site and pipeline."""
    try:
        where = first_user_frame(3)
        stages = pipeline(dataset)
        key = ("pipeline", consumer, where, tuple(s.get("site") for s in stages))
        if key in _sent:
            return
        _sent.add(key)
        sited = [s["site"].rpartition(":")[0] for s in stages if s.get("site")]
        channel().emit(Kind.CODE_SITES, call=consumer, site=f"{where[0]}:{where[1]}" if where else None,
                       stages=stages, **({"model": id(model)} if model is not None else {}), files=_files(where[0] if where else None, *sited))
    except Exception:
        pass


def user_stack(depth: int = 2, limit: int = 8) -> list[tuple[str, int]]:
    """The user's frames on the stack, innermost first (at most ``limit``)."""
    frame: FrameType | None = sys._getframe(depth)
    out: list[tuple[str, int]] = []
    while frame is not None and len(out) < limit:
        if is_user_file(frame.f_code.co_filename):
            out.append((os.path.abspath(frame.f_code.co_filename), frame.f_lineno))
        frame = frame.f_back
    return out


def send_call(call: str, depth: int = 3, stack: bool = False, **facts) -> None:
    """Send the user's site of a call (``compile``, ``predict``, ``gradient``, ``model``), once per site;
    with ``stack``, the user's frames around it too."""
    frames = user_stack(depth) if stack else [w for w in [first_user_frame(depth)] if w]
    if not frames or (call, *frames[0]) in _sent:
        return
    where = frames[0]
    _sent.add((call, *where))
    if stack:
        facts["stack"] = [f"{p}:{line}" for p, line in frames]
    channel().emit(Kind.CODE_SITES, call=call, site=f"{where[0]}:{where[1]}",
                   files=_files(*(p for p, _ in frames)), **facts)


SPEED_ARGUMENTS = ("run_eagerly", "jit_compile", "steps_per_execution")


def _compile_sited(original):
    @functools.wraps(original)
    def compile_(self, *args, **kwargs):
        try:
            send_call("compile", given=sorted(k for k in kwargs if k in SPEED_ARGUMENTS), model=id(self))
        except Exception:
            pass
        return original(self, *args, **kwargs)

    return compile_


def _call_sited(call: str, only_eager=None):
    def wrap(original):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            try:
                if only_eager is None or only_eager():
                    send_call(call)
            except Exception:
                pass
            return original(*args, **kwargs)

        return wrapper

    return wrap


def _model_sited(original):
    @functools.wraps(original)
    def init(*args, **kwargs):
        try:
            send_call("model", depth=3, stack=True)
        except Exception:
            pass
        return original(*args, **kwargs)

    return init


class _FitSites(FitListener):
    def after_fit(self, model) -> None:
        history = getattr(getattr(model, "history", None), "history", None) or {}
        losses = history.get("loss")
        if isinstance(losses, list):
            try:
                channel().emit(Kind.CODE_SITES, call="fit_losses", losses=[float(v) for v in losses[:100]])
            except Exception:
                pass


@on_fit
def _fit_sites(call: FitCall) -> FitListener | None:
    if call.fit_input is None:
        return None
    tf = sys.modules.get("tensorflow")
    x = call.fit_input[0]
    if tf is not None and isinstance(x, tf.data.Dataset):
        send_pipeline(x, "fit", call.model)
    else:
        send_call("fit", depth=3, input=type(x).__name__, model=id(call.model))
    return _FitSites()


@on_tensorflow
def _patch_tensorflow(tf) -> None:
    from tensorgauge.hook.dataset_facts import dataset_class

    if dataset_class() is not None:
        patch_datasets(dataset_class())
    wrap_once(tf.GradientTape, "gradient", _call_sited("gradient", tf.executing_eagerly), by=FEATURE, inherited=True)
    threading = getattr(getattr(tf, "config", None), "threading", None)
    for name in ("set_intra_op_parallelism_threads", "set_inter_op_parallelism_threads"):
        if threading is not None:
            wrap_once(threading, name, _call_sited(name), by=FEATURE)


LOADER_ARGUMENTS = ("num_workers", "persistent_workers", "batch_size")


def _loader_sited(original):
    @functools.wraps(original)
    def init(self, *args, **kwargs):
        try:
            send_call("dataloader", given=sorted(k for k in kwargs if k in LOADER_ARGUMENTS),
                      num_workers=int(kwargs.get("num_workers") or 0))
        except Exception:
            pass
        return original(self, *args, **kwargs)

    return init


@on_torch
def _patch_torch(torch) -> None:
    loader = getattr(getattr(getattr(torch, "utils", None), "data", None), "DataLoader", None)
    if loader is not None:
        wrap_once(loader, "__init__", _loader_sited, by=FEATURE)


@on_keras
def _patch_keras(keras) -> None:
    model_class = getattr(keras, "Model", None)
    for name, wrap in (("compile", _compile_sited), ("predict", _call_sited("predict")),
                       ("__init__", _model_sited)):
        for klass in getattr(model_class, "__mro__", ()):
            if name in klass.__dict__:
                wrap_once(klass, name, wrap, by=FEATURE)
                break
