"""Ctrl-C reaches the user as KeyboardInterrupt, and never lands half-way through a release.

Python runs a signal's handler between two bytecodes of whatever code runs at that moment,
finalizers included. A KeyboardInterrupt raised inside a `__del__` is printed as "Exception
ignored" and lost; one raised half-way through a free() leaves a pointer freed but not yet
forgotten, which the next free frees again (a crash). So the functions that release or account
ggml memory are marked `@uninterruptible`, and ggmlpy's SIGINT handler, finding one of them on
the interrupted stack, raises nothing: it re-arms the interrupt, which Python delivers at its
next check, once the marked code has returned. Marking costs nothing: the stack is looked at
only when a SIGINT arrives.

The handler replaces Python's default one only, and only when ggmlpy is imported from the main
thread: a handler of the user's own stays theirs. Re-arming calls PyErr_SetInterrupt from a cffi
destructor, that is from C: a call made from Python code would make Python check its pending
signals right after it returned, inside the handler, which would run again there, nested.
"""
from __future__ import annotations

import ctypes
import signal
import threading

from .bindings import ffi

_CRITICAL: set = set()  # code objects during which no KeyboardInterrupt is raised
_rearm = None  # () -> an object whose destruction re-arms SIGINT (C code), or None: not installed


def uninterruptible(fn):
    """Mark `fn` as code that a SIGINT must not interrupt (releases, pool accounting): an
    interrupt arriving while it runs, or anything it calls, is raised after it returns."""
    _CRITICAL.add(fn.__code__)
    return fn


def mark(*fns) -> None:
    """uninterruptible() for functions defined elsewhere (weakref.finalize.__call__)."""
    for fn in fns:
        uninterruptible(fn)


def _on_sigint(signum, frame):
    f = frame
    while f is not None:
        if f.f_code in _CRITICAL:
            token = _rearm()  # nothing is pending while this call runs: the trip was consumed
            del token  # its destructor re-arms SIGINT; no Python call follows, so no nested check
            return
        f = f.f_back
    raise KeyboardInterrupt


def _rearmer():
    """A function making the re-arming token (ggmlpy's FFI: its C type parser, not cffi's pycparser)."""
    addr = ctypes.cast(ctypes.pythonapi.PyErr_SetInterrupt, ctypes.c_void_p).value
    # PyErr_SetInterrupt takes no argument; the one a cffi destructor passes is ignored by every C ABI
    trip = ffi.cast("void (*)(void *)", addr)
    one = ffi.cast("void *", 1)
    return lambda: ffi.gc(one, trip)


def install() -> bool:
    """Install the handler (in place of Python's default SIGINT handler only); True if installed."""
    global _rearm
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return False
        _rearm = _rearm or _rearmer()
        signal.signal(signal.SIGINT, _on_sigint)
    except Exception:  # noqa: BLE001 - no Python C API to reach, no signals (embedded): Python's default
        return False
    return True


def installed() -> bool:
    return signal.getsignal(signal.SIGINT) is _on_sigint
