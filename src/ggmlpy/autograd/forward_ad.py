"""Forward-mode AD with nested levels, after PyTorch's ForwardGrad / ForwardADLevel design
(docs/design.md), but with real nesting (as HIPS autograd and JAX have).

Storage. Every ag tensor that has a tangent owns a `ForwardGrad`: a map from
level index to tangent (itself an ag tensor, on the device). Setting a tangent
registers the ForwardGrad with its level; resetting it unregisters it.

Levels. One process-wide registry of level slots, as the seed designs it: a
level is a plain integer that every thread may use, so a level entered in one
thread carries duals made, computed on and unpacked in another. A level's index
is the first free slot (in one thread, its nesting depth), and indices are
reused only after the level is cleaned. Exiting a level clears that level's
tangents from every ForwardGrad registered with it, and only that level's: a
stale index can therefore never reach the tangents of a later level with the
same number. Ops propagate every open level their inputs carry a tangent for,
oldest first (levels are ordered by when they were entered, not by index).

What stays per thread (runtime/autograd_state.py's dual_levels): the stack of
levels a thread entered, which gives `make_dual`/`unpack_dual` their default
level, and whose innermost only that thread may exit: one thread's
`dual_level()` can neither close nor mask another thread's levels (masking, the
JVP rule of level L running with L off, is per thread too). A level exited
while another thread still computes with it: that thread's next tangent write
at it raises "level N is not active"; what it already holds was cleared.

Lifetime. A level is "initialised" while the registry holds it; after exit it is
"about to be cleaned" while some ForwardGrad method still holds an owning
reference (`_Ref`); the last reference out runs the clean-up, so a set_value in
flight can never leave a tangent behind in a level that has been cleaned. A
tensor's ForwardGrad is cleared (unregistered) when the tensor is destroyed, via
weakref.finalize, so a level's set does not grow with short-lived duals.

Lock order (never taken in reverse): registry lock -> level lock -> ForwardGrad
lock. No method calls into another class while holding its own lock, except the
level's clean-up, which resets ForwardGrads (with update_level=False) while
holding the level's lock.

Nesting. A JVP rule for level L runs with L masked: the ops inside it propagate
the other levels' tangents (which is what gives second derivatives) but not L's
own (a dual number's epsilon squares to zero). Distinct levels keep distinct
perturbations apart, so `d/dx (x * d/dy (x + y))` is 1, not 2.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from .._sigint import uninterruptible
from ..errors import GGMLError
from ..runtime.autograd_state import AUTOGRAD
from ..tensor import AGTensor, ag_tensor
from .call import Call
from .tape import TapeNode

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from .rules import Rule

LEVELS: list = []  # the registry's slots (None: free), index = level; non-empty means forward AD is on
_registry_lock = threading.Lock()


_serials = itertools.count()  # entry order of levels across threads (an index is reused, this is not)


class ForwardADLevel:
    def __init__(self, idx: int):
        self.idx = idx
        self.serial = next(_serials)
        self._lock = threading.Lock()
        self._grads: set = set()
        self._refs = 1  # the registry's own reference; guarded by _registry_lock

    def insert(self, fg: "ForwardGrad") -> None:
        with self._lock:
            self._grads.add(fg)

    def erase(self, fg: "ForwardGrad") -> None:
        with self._lock:
            self._grads.discard(fg)

    def __len__(self):
        with self._lock:
            return len(self._grads)

    def _cleanup(self) -> None:
        """The level is gone: drop its tangents everywhere (the one cross-class call under a lock)."""
        with self._lock:
            grads, self._grads = self._grads, set()
            for fg in grads:
                fg.reset(self.idx, update_level=False)


class _Ref:
    """An owning reference to a level: its clean-up waits until every _Ref is released."""

    def __init__(self, level: ForwardADLevel):
        self.level = level

    def __enter__(self):
        return self.level

    def __exit__(self, *exc):
        _unref(self.level)


def _unref(level: ForwardADLevel) -> None:
    with _registry_lock:
        level._refs -= 1
        last = level._refs == 0
    if last:
        level._cleanup()


def get_by_idx(idx: int) -> _Ref:
    ref = try_get_by_idx(idx)
    if ref is None:
        raise GGMLError(f"forward AD level {idx} is not active")
    return ref


def try_get_by_idx(idx: int) -> _Ref | None:
    with _registry_lock:
        if 0 <= idx < len(LEVELS) and LEVELS[idx] is not None:
            LEVELS[idx]._refs += 1
            return _Ref(LEVELS[idx])
    return None


def enter_dual_level() -> int:
    """Open a new level, innermost in this thread, and return its index (in one thread, its
    nesting depth). Any thread may make duals at it, compute with them and unpack them."""
    with _registry_lock:
        idx = LEVELS.index(None) if None in LEVELS else len(LEVELS)
        if idx == len(LEVELS):
            LEVELS.append(None)
        LEVELS[idx] = ForwardADLevel(idx)
    AUTOGRAD.dual_levels.append(idx)
    return idx


def exit_dual_level(level: int | None = None) -> None:
    """Close this thread's innermost level, clearing its tangents from every tensor."""
    stack = AUTOGRAD.dual_levels
    if not stack:
        raise GGMLError("exit_dual_level: no forward AD level is active in this thread")
    inner = stack[-1]
    level = inner if level is None else level
    if level != inner:
        raise GGMLError(f"exit_dual_level: trying to exit level {level}, but level {inner} is this thread's "
                        "innermost; levels must be exited in reverse order of entry")
    with _registry_lock:
        lvl, LEVELS[inner] = LEVELS[inner], None
        while LEVELS and LEVELS[-1] is None:
            LEVELS.pop()
    stack.pop()
    _unref(lvl)


@contextlib.contextmanager
def dual_level() -> Iterator[int]:
    """`with dual_level() as level:` enters a level and exits it on leaving the block."""
    idx = enter_dual_level()
    try:
        yield idx
    finally:
        exit_dual_level(idx)


class ForwardGrad:
    """Tangents of one tensor, per level."""

    __slots__ = ("_lock", "_content", "__weakref__")

    def __init__(self):
        self._lock = threading.Lock()
        self._content: dict = {}

    def set_value(self, value: AGTensor, level: int) -> None:
        # The owning reference keeps the level's clean-up from running until our write is in.
        with get_by_idx(level) as lvl:
            lvl.insert(self)
            with self._lock:
                self._content[level] = value

    def reset(self, level: int, update_level: bool = True) -> None:
        if update_level:
            ref = try_get_by_idx(level)
            if ref is not None:
                with ref as lvl:
                    lvl.erase(self)
        with self._lock:
            self._content.pop(level, None)

    def value(self, level: int):
        with self._lock:
            return self._content.get(level)

    def levels(self) -> list:
        with self._lock:
            return list(self._content)

    def contains(self, level: int) -> bool:
        with self._lock:
            return level in self._content

    @uninterruptible
    def clear(self) -> None:
        """The owning tensor is gone: unregister from every level (another thread may be exiting one)."""
        for idx in self.levels():
            ref = try_get_by_idx(idx)
            if ref is not None:
                with ref as lvl:
                    lvl.erase(self)


def _forward_grad(t: AGTensor) -> ForwardGrad:
    fg = t.fwd_grad
    if fg is None:
        fg = t.fwd_grad = ForwardGrad()
        weakref.finalize(t, fg.clear)
    return fg


def _innermost() -> int:
    stack = AUTOGRAD.dual_levels
    if not stack:
        raise GGMLError("no forward AD level is active in this thread: use `with dual_level():` first")
    return stack[-1]


def _alias(t: AGTensor) -> AGTensor:
    """A new tensor on t's memory, connected to t on the tape (gradients flow through)."""
    out = AGTensor(t.storage, t.shape, t.device_context, requires_grad=t.requires_grad, is_leaf=False)
    if t.requires_grad and AUTOGRAD.recording():
        AUTOGRAD.tape_nodes.append(TapeNode("copy", out.id, [(t.id, True, t if t.is_leaf else None)], {}, {}, (t.shape,)))
    return out


def make_dual(primal: AGTensor, tangent: AGTensor | ArrayLike, level: int | None = None) -> AGTensor:
    """A tensor with primal's values and `tangent` at `level` (default: the innermost)."""
    if not isinstance(primal, AGTensor):
        raise GGMLError(f"make_dual: primal must be an ag tensor, got {type(primal).__name__}")
    level = _innermost() if level is None else level
    if not isinstance(tangent, AGTensor):
        tangent = ag_tensor(tangent, device=primal.device_context.spec)
    if tangent.shape != primal.shape:
        raise GGMLError(f"make_dual: tangent shape {list(tangent.shape)} differs from primal's {list(primal.shape)}")
    if tangent.device_context is not primal.device_context:
        raise GGMLError("make_dual: tangent and primal are on different devices")
    dual = _alias(primal)
    if primal.fwd_grad is not None:  # tangents at other levels carry over
        for lv in primal.fwd_grad.levels():
            if lv != level:
                _forward_grad(dual).set_value(primal.fwd_grad.value(lv), lv)
    _forward_grad(dual).set_value(tangent, level)
    return dual


def unpack_dual(t: AGTensor, level: int | None = None) -> tuple[AGTensor, AGTensor | None]:
    """(primal, tangent) of t at `level`; the tangent is None when t has none there."""
    if not isinstance(t, AGTensor):
        raise GGMLError(f"unpack_dual: expected an ag tensor, got {type(t).__name__}")
    if level is None:
        stack = AUTOGRAD.dual_levels
        level = stack[-1] if stack else -1
    tangent = t.fwd_grad.value(level) if t.fwd_grad is not None else None
    if tangent is None:
        return t, None
    primal = _alias(t)
    for lv in t.fwd_grad.levels():
        if lv != level:
            _forward_grad(primal).set_value(t.fwd_grad.value(lv), lv)
    return primal, tangent


def tangent_of(t: AGTensor, level: int) -> AGTensor | None:
    return t.fwd_grad.value(level) if t.fwd_grad is not None else None


def copy_tangents(src: AGTensor, dst: AGTensor) -> None:
    if src.fwd_grad is not None:
        for lv in src.fwd_grad.levels():
            value = src.fwd_grad.value(lv)
            if value is not None:
                _forward_grad(dst).set_value(value, lv)


# -- propagation through primitives (called by engine.apply while a level is open) -----------------------
def _open_in_entry_order(indices) -> list:
    """The indices of open levels among `indices`, in the order the levels were entered."""
    with _registry_lock:
        open_ = [LEVELS[i] for i in indices if 0 <= i < len(LEVELS) and LEVELS[i] is not None]
    return [lvl.idx for lvl in sorted(open_, key=lambda lvl: lvl.serial)]


def propagate(rule: Rule, out: AGTensor, inputs: Sequence[AGTensor], params: dict, apply) -> None:
    """Set out's tangents at this thread's levels from the inputs' by the primitive's JVP rule,
    whose own primitives go through `apply` (engine.apply, which calls this)."""
    present = set()
    for x in inputs:
        if x.fwd_grad is not None:
            present.update(x.fwd_grad.levels())
    if not present:
        return
    masked = AUTOGRAD.masked_levels
    # every open level the inputs carry, oldest first: an inner level's tangent rule may read
    # `out`, whose outer tangents must already be set (that product is the second derivative)
    levels = _open_in_entry_order(lv for lv in present if lv not in masked)
    if not levels:
        return
    if rule.jvp is None:
        raise GGMLError("this operation has no forward-mode (JVP) rule")
    call = Call.of(apply, inputs, out, params)
    for lv in levels:
        tangents = [tangent_of(x, lv) for x in inputs]
        masked.add(lv)
        try:
            t_out = rule.jvp(tangents, call)
        finally:
            masked.discard(lv)
        if t_out is not None:
            _forward_grad(out).set_value(t_out, lv)
