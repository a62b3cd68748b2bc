"""Autograd's state, in one place: what belongs to the calling thread and what to the process.

Per thread (PyTorch's contract for grad mode and the tape): one thread's blocks neither record,
trace nor switch another thread's ops. `AUTOGRAD` holds, for the calling thread,
  the tape          `tape_enabled` inside with_grad_tape(), `tape_paused` inside no_grad(), and
                    `tape_nodes`, what the tape recorded (autograd/tape.py);
  graph tracing     `trace`, the primitives applied while ag_compile traces fn (engine.apply appends),
                    and `host_reads`, the tensors whose values were read on the host meanwhile
                    (AGTensor.numpy appends; ag_compile refuses those);
  checkpointing     `watchers`, one set per open ag_checkpoint run, of the ids of the trainable
                    leaves its ops read (engine.watch_params);
  graph building    `blas_products` and `cpu_kernels`: how prims.py builds products and GELU, set
                    by the builders that know the device;
  forward mode      `dual_levels`, the levels this thread entered, outermost first (the ones its ops
                    propagate), and `masked_levels`, those whose JVP rule is running.

Per process:
  forward-mode levels themselves: the level registry (forward_ad.LEVELS) is process-wide by design
                    (the seed's forward_grad.h: a level is a plain integer that any thread may use,
                    each level with its own lock); only the stack of entered levels above is per thread;
  `hooks_open()`    whether any thread has a trace or a checkpoint watcher open, so that applying a
                    primitive skips reading them when none has (the common case);
  the selected device and dtype, and the pools and caches per thread and device: runtime/state.py.

This module sits in runtime/, below tensor.py, because a tensor's host read is one of these modes
(as PyTorch keeps its AutogradState in c10, below the tensor). It holds state only: the blocks
that set it are the tape's, the engine's and graph_mode's.
"""
from __future__ import annotations

import contextlib
import threading


class AutogradState(threading.local):
    """The calling thread's autograd modes (see the module's docstring for each field)."""

    def __init__(self):
        self.tape_enabled = False
        self.tape_paused = False
        self.tape_nodes: list = []
        self.trace = None
        self.host_reads: list | None = None
        self.watchers: list = []
        self.blas_products = False
        self.cpu_kernels = False
        self.dual_levels: list = []
        self.masked_levels: set = set()

    def recording(self) -> bool:
        """Whether ops applied now are recorded on the tape."""
        return self.tape_enabled and not self.tape_paused


AUTOGRAD = AutogradState()


@contextlib.contextmanager
def setting(name: str, value):
    """AUTOGRAD.<name> is `value` in this block, in this thread (the previous value afterwards,
    also when the block raises). Yields value."""
    prev = getattr(AUTOGRAD, name)
    setattr(AUTOGRAD, name, value)
    try:
        yield value
    finally:
        setattr(AUTOGRAD, name, prev)


_open_hooks = [0]  # threads with a trace or a watcher open, all threads together
_open_hooks_lock = threading.Lock()


def hooks_open() -> bool:
    """Whether some thread has a trace or a checkpoint watcher open (then read AUTOGRAD's)."""
    return _open_hooks[0] != 0


@contextlib.contextmanager
def hook_opened():
    """Count a trace or watcher opened by this thread for the duration of the block."""
    with _open_hooks_lock:
        _open_hooks[0] += 1
    try:
        yield
    finally:
        with _open_hooks_lock:
            _open_hooks[0] -= 1
