"""Wrapping the job's libraries' functions, once: one mark and one way to put a wrapper in place.

Every wrapper the hook installs carries the function it wraps (:data:`WRAPPED`) and who made
it (:data:`BY`: a feature's name). :func:`wrap_once` never wraps a function twice for the same
feature (a second install, a class and its subclass, an alias of a module function) while two
features may each wrap the same function (``predict`` has a phase and a call counter), in
either order. :func:`innermost` finds the library's own function under all of them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

WRAPPED = "__tensorgauge_wrapped__"  # on a wrapper: the function it wraps
BY = "__tensorgauge_by__"  # on a wrapper: the feature that made it
PHASES = "phases"  # the phase wrappers of :mod:`.patches`, the default


def original_of(function: object) -> Any:
    """The function that ``function`` wraps, or None where it is not a wrapper of ours."""
    return getattr(function, WRAPPED, None)


def wrapped_by(function: object, by: str = PHASES) -> bool:
    """``function`` is, or wraps at any depth, a wrapper that ``by`` made."""
    seen = 0
    while function is not None and seen < 32:
        if getattr(function, BY, None) == by and original_of(function) is not None:
            return True
        function, seen = original_of(function), seen + 1
    return False


def innermost(function: Any) -> Any:
    """The function under every wrapper of ours (itself where there is none)."""
    while original_of(function) is not None:
        function = original_of(function)
    return function


def mark(wrapper: Any, original: Any, by: str = PHASES) -> Any:
    """``wrapper`` marked as ``by``'s wrapper of ``original`` (its name and docstring taken from it)."""
    if getattr(wrapper, "__wrapped__", None) is not original:
        try:
            functools.update_wrapper(wrapper, original)
        except (AttributeError, TypeError):
            pass
    setattr(wrapper, WRAPPED, original)
    setattr(wrapper, BY, by)
    return wrapper


def wrap_once(owner: Any, name: str, make: Callable[[Any], Any], by: str = PHASES, inherited: bool = False) -> Any:
    """Put ``make(original)``, marked, in place of ``owner.name``, unless ``by`` wrapped it already; the
    wrapper, or None where there was nothing to wrap or it was wrapped. On a class, only a function the
    class defines itself (every subclass then sees the wrapper), unless ``inherited``; a staticmethod
    stays one."""
    found: Any = vars(owner).get(name) if isinstance(owner, type) and not inherited else getattr(owner, name, None)
    static = isinstance(found, staticmethod)
    original = found.__func__ if static else found
    if original is None or wrapped_by(original, by):
        return None
    wrapper = mark(make(original), original, by)
    setattr(owner, name, staticmethod(wrapper) if static else wrapper)
    return wrapper
