"""One thread setting for every CPU computation: ag_* (eager and compiled), the Keras-like
models, ONNX models and ggml_graph_compute.

The count starts as $GGMLPY_N_THREADS, or every core this process may use. ggmlpy's CPU
backends (and the BLAS helper backends beside them) *follow* the setting: set_num_threads()
reaches the ones already made, so a model loaded earlier computes with the new count. A
backend whose count is set explicitly (Backend.set_n_threads, onnx_load(n_threads=...), the
one-thread backends kept for small ops) stops following: what is asked of one backend wins
over the process-wide setting.

Invariant: every live follower has been told the current count (a change reaches each one
under the lock, and a new follower is told when it joins). A backend computing in another
thread while the count changes finishes with the count it planned with: ggml reads it once
per graph compute.
"""
from __future__ import annotations

import os
import threading
import weakref

from ..errors import GGMLError

ENV_VAR = "GGMLPY_N_THREADS"
MAX_THREADS = 512  # ggml.h's GGML_MAX_N_THREADS: its thread pool holds no more

_lock = threading.Lock()
_count: int | None = None  # None: not set yet (the environment variable or the core count decides)
_followers: "weakref.WeakSet" = weakref.WeakSet()


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _from_environment() -> int:
    text = os.environ.get(ENV_VAR, "").strip()
    if not text:
        return _cores()
    try:
        n = int(text)
    except ValueError:
        raise GGMLError(f"{ENV_VAR}={text!r} is not a whole number of threads") from None
    return checked_count(n, f"{ENV_VAR}={text!r}")


def checked_count(n, what: str = "set_num_threads") -> int:
    """`n` as a thread count, or GGMLError naming `what` (bools and fractions are refused)."""
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise GGMLError(f"{what}: the number of threads must be a whole number, got {n!r}")
    n = int(n)
    if n < 1:
        raise GGMLError(f"{what}: Number of threads must be at least 1, got {n}")
    if n > MAX_THREADS:
        raise GGMLError(f"{what}: ggml runs at most {MAX_THREADS} threads, got {n}")
    return n


def get_num_threads() -> int:
    """The number of threads ggmlpy computes with on the CPU ($GGMLPY_N_THREADS, or every core
    this process may use, until set_num_threads() changes it)."""
    global _count
    with _lock:
        if _count is None:
            _count = _from_environment()
        return _count


def set_num_threads(n: int) -> int:
    """Compute with `n` CPU threads from now on, in every front end (ag_* eager and compiled,
    the Keras-like models, ONNX models, ggml_graph_compute), including models and backends
    made before the call; like torch.set_num_threads. Returns `n`."""
    global _count
    n = checked_count(n)
    with _lock:
        _count = n
        for backend in list(_followers):
            backend._use_threads(n)
    return n


def follow(backend) -> None:
    """Make `backend` (an object with `_use_threads(n)`) compute with the setting, now and after
    every change."""
    n = get_num_threads()
    with _lock:
        _followers.add(backend)
        backend._use_threads(_count if _count is not None else n)


def unfollow(backend) -> None:
    """`backend` keeps the count it is given from now on."""
    with _lock:
        _followers.discard(backend)


def follows(backend) -> bool:
    with _lock:
        return backend in _followers
