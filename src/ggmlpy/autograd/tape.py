"""The gradient tape: ggmlR's `.ag_tape`, `with_grad_tape()` and `backward()`.

The tape is the calling thread's (PyTorch's contract: grad mode and the tape are per
thread, so one thread's with_grad_tape() neither records nor resets another's ops): its
nodes and flags live in runtime/autograd_state.py with autograd's other per-thread modes.

A node names its backward rule (`op`, a key of the rule table) and keeps, as
snapshots, only the tensors that rule needs. Snapshots are the ag tensors
themselves, i.e. references to ggml tensors in the pass pool: nothing is
copied to numpy.
"""
from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..runtime.autograd_state import AUTOGRAD
from ..runtime.state import STATE


@dataclass(eq=False)
class TapeNode:
    op: str | None                 # the backward rule; None for a checkpoint (see checkpoint.py)
    out_id: int
    inputs: list                   # per input: (id, requires_grad, tensor if it is a leaf else None)
    saved: dict                    # snapshots the rule needs: {"x0": t, "x1": t, "out": t}
    params: dict = field(default_factory=dict)
    in_shapes: tuple = ()
    backward_fn: object = None     # checkpoint nodes only: (grad_out, grads, leaves) -> input grads

    def x(self, i: int):
        """Snapshot of input i (only those the rule declared in `saves`)."""
        return self.saved[f"x{i}"]

    @property
    def out(self):
        return self.saved["out"]


class with_grad_tape(contextlib.ContextDecorator):
    """Clear the tape, reset this thread's pass pool (bumping ctx_gen), and record ops in the block.

    Recording stops when the block exits, also when it raises. The recorded nodes
    stay until the next with_grad_tape(), so backward() can run after the block.
    Tensors from earlier tapes that are still referenced keep their values: the reset
    moves them out of the pass pool (see runtime/pool.py)."""

    def __enter__(self):
        AUTOGRAD.tape_nodes = []  # first: the snapshots only the tape held are freed, not moved
        STATE.context().pass_pool.reset()
        AUTOGRAD.tape_enabled = True
        return AUTOGRAD

    def __exit__(self, *exc):
        AUTOGRAD.tape_enabled = False
        return False


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Run ops without recording them (the tape's nodes are left as they are)."""
    prev = AUTOGRAD.tape_paused
    AUTOGRAD.tape_paused = True
    try:
        yield
    finally:
        AUTOGRAD.tape_paused = prev


@contextlib.contextmanager
def private_tape() -> Iterator[None]:
    """Record the block on a tape of its own, without resetting any pool (the caller's tape,
    flags and tensors are as they were afterwards): for a backward pass inside a computation that
    must not be interrupted, such as a function ag_compile traces."""
    saved = AUTOGRAD.tape_nodes, AUTOGRAD.tape_enabled, AUTOGRAD.tape_paused
    AUTOGRAD.tape_nodes, AUTOGRAD.tape_enabled, AUTOGRAD.tape_paused = [], True, False
    try:
        yield
    finally:
        AUTOGRAD.tape_enabled, AUTOGRAD.tape_paused = saved[1], saved[2]
        AUTOGRAD.tape_nodes = saved[0]


def tape_bytes() -> int:
    """Bytes of ggml memory the tape's snapshots hold (each tensor counted once)."""
    seen, total = set(), 0
    for node in AUTOGRAD.tape_nodes:
        for t in node.saved.values():
            if t.id not in seen:
                seen.add(t.id)
                total += t.nbytes()
    return total


def tape_report() -> dict:
    """Snapshot bytes held by the tape, by backward rule, plus node counts."""
    by_op, count, seen = defaultdict(int), defaultdict(int), set()
    for node in AUTOGRAD.tape_nodes:
        key = node.op or "checkpoint"
        count[key] += 1
        for t in node.saved.values():
            if t.id not in seen:
                seen.add(t.id)
                by_op[key] += t.nbytes()
    total = sum(by_op.values())
    rows = sorted(count, key=lambda k: -by_op[k])
    return {"total_bytes": total, "nodes": len(AUTOGRAD.tape_nodes),
            "by_op": {k: {"bytes": by_op[k], "nodes": count[k],
                          "share": (by_op[k] / total if total else 0.0)} for k in rows}}
