"""Ending the job on tensorgauge's behalf (a budget stop, the end of a --try-fixes
window), and the ``exit`` event sent as the interpreter shuts down."""

from __future__ import annotations

import os
import sys

from tensorgauge.hook.channel import channel
from tensorgauge.hook.protocol import Kind

_exit_code: int | None = None


def exit_job(code: int) -> None:
    """End the job because tensorgauge stopped it (budget, try-fixes window).

    Raises SystemExit so the job's ``finally`` blocks and atexit handlers run;
    then :func:`at_exit`, which runs last, ends the process with ``os._exit``:
    interpreter finalisation can deadlock when a tf.data pipeline with a Python
    function is torn down mid-iteration.
    """
    global _exit_code
    _exit_code = code
    raise SystemExit(code)


def at_exit() -> None:
    """Registered first, so it runs after the job's own atexit handlers: what the
    kernel counts after the ``exit`` event is interpreter and TensorFlow shutdown."""
    channel().emit(Kind.EXIT)
    if _exit_code is not None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(_exit_code)
