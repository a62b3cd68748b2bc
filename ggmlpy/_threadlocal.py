"""A thread-local setting for the duration of a block (graph emission, BLAS products, host-read
recording): each thread sees only its own, so one thread's block never changes another's ops."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def bound(local, name: str, value):
    """`local.<name>` is `value` in this block, in this thread; the previous value (None if
    unset) afterwards. Yields value."""
    prev = getattr(local, name, None)
    setattr(local, name, value)
    try:
        yield value
    finally:
        setattr(local, name, prev)
