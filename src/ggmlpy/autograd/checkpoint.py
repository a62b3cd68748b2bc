"""Gradient checkpointing: run a segment without recording it, replay it during backward.

The specification is ggmlR's `ag_checkpoint` design (docs/design.md).
Why a wrapper and not a tape analysis: a node names its *backward* rule, not the
function that produced it, so nothing on the tape can be re-run; the segment is
handed in as a Python callable, as torch.utils.checkpoint does.

The contract, point by point (each has a test in tests/test_checkpoint.py):
 1. The segment's forward pass records nothing. The tape's flag and node list are
    restored in a `finally`, so a segment that raises leaves the tape as it was.
 2. RNG: the state is saved before the first run; a failed run restores it; the
    replay starts from it (same dropout masks) and restores the caller's stream
    afterwards. Unlike ggmlR, a successful run does *not* rewind it: after the
    segment the stream continues as if there were no checkpoint, so two
    checkpointed dropout blocks draw different masks, as without checkpointing.
 3. The output re-enters the tape as a fresh tensor: detached from the segment's
    internals (no parameter is reached twice) but recorded against the caller's
    inputs (earlier layers still get gradients).
 4. The node is recorded even when no input needs a gradient: the parameters
    live inside the segment.
 5. The replay runs on a private tape; the segment's parameters get their
    gradients (into the backward's result and `.grad`), the caller's inputs get
    theirs returned, and tensors made inside the segment get none.
 6. The replay must not reset any pool nor switch device or dtype: the pass
    pool's generation, the device and the dtype are checked, and a change raises
    instead of returning gradients from freed memory or from another computation.
 7. Gradients stay on the device: each leaf's is accumulated once, at the end.
 8. ag_backward_graph declines a tape holding a checkpoint node (op None). When ag_compile traces
    a segment, its primitives are recorded as a range; the compiled step emits them a second time
    in the backward part of its graph (graph_backward.emit_backward), so the compute buffer does not
    keep their activations either.
 9. The loop-variable trap: a closure that sees a different layer at replay time
    is detected by comparing the parameters the segment touched in both runs.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable

from .. import random as grandom
from .._frames import user_location, user_stacklevel
from ..runtime.autograd_state import AUTOGRAD
from ..runtime.state import DTYPE_NAMES, STATE
from ..errors import GGMLError, StaleTensorError
from ..tensor import AGTensor
from . import engine, forward_ad
from .tape import TapeNode


class CheckpointReplayError(GGMLError):
    """The segment reset a memory pool (or switched device) while being replayed."""


def ag_checkpoint(fn: Callable[..., AGTensor], *inputs: AGTensor) -> AGTensor:
    """Run `fn(*inputs)` without storing its activations; recompute them during backward()."""
    if not callable(fn):
        raise GGMLError("ag_checkpoint() expects a function as its first argument.")
    if not AUTOGRAD.recording():
        trace = engine.current_trace()
        if trace is None:
            return fn(*inputs)
        start = len(trace)  # compiling: the compiled step emits this range again in its backward
        out = fn(*inputs)
        trace.segments.append((start, len(trace)))
        return out

    rng_state = grandom.get_rng_state()
    saved_nodes, saved_enabled = AUTOGRAD.tape_nodes, AUTOGRAD.tape_enabled
    AUTOGRAD.tape_enabled = False
    ok = False
    with engine.watch_params() as used_first:
        try:
            out_val = fn(*inputs)
            ok = True
        finally:
            AUTOGRAD.tape_enabled, AUTOGRAD.tape_nodes = saved_enabled, saved_nodes
            if not ok:
                grandom.set_rng_state(rng_state)
    if not isinstance(out_val, AGTensor):
        raise GGMLError(f"ag_checkpoint: the segment must return one ag tensor, got {type(out_val).__name__}")

    out = AGTensor(out_val.storage, out_val.shape, out_val.device_context, requires_grad=True, is_leaf=False)
    forward_ad.copy_tangents(out_val, out)  # tangents of the forward run carry over (forward AD)
    ag_inputs = [x for x in inputs if isinstance(x, AGTensor)]

    where = user_location()  # named by the loop-variable warning, which backward() gives

    def replay(grad_out, grads, leaves):
        return _replay(fn, inputs, grad_out, rng_state, used_first, grads, leaves, where)

    AUTOGRAD.tape_nodes.append(TapeNode(None, out.id, [(x.id, x.requires_grad, x if x.is_leaf else None) for x in ag_inputs],
                           {f"x{i}": x for i, x in enumerate(ag_inputs)}, {}, tuple(x.shape for x in ag_inputs),
                           backward_fn=replay))
    return out


def _state_now(dc=None) -> tuple:
    """What the replay must leave as it found it: device, its pass pool's generation, dtype."""
    dc = STATE.context() if dc is None else dc
    return dc, dc.pass_pool.gen, STATE.dtype


def _check_generations(before) -> None:
    """Contract point 6 (above): the replay must not reset the pool, nor switch device or dtype. Checked, not
    trusted: a later refactor reaching for with_grad_tape() would otherwise hand back gradients
    from freed memory, and a switch would differentiate another computation than the forward's."""
    dc, now = before[0], STATE.context()
    after = _state_now(dc)
    if after != before or now is not dc:
        raise CheckpointReplayError(
            f"ag_checkpoint() replay reset the ggml memory pools or switched device or dtype (pass "
            f"{before[1]} -> {after[1]}, dtype {DTYPE_NAMES[before[2]]} -> {DTYPE_NAMES[after[2]]}"
            f"{'' if now is dc else f', device {dc.name} -> {now.name}'}). Gradients already accumulated "
            "would be wrong. The segment must not call with_grad_tape() or ag_device(), nor ag_dtype().")


def _replay(fn, inputs, grad_out, rng_state, used_first, grads, leaves, where="<unknown>"):
    """Re-run the segment on a private tape and push `grad_out` back through it."""
    outer_nodes, outer_enabled = AUTOGRAD.tape_nodes, AUTOGRAD.tape_enabled
    outer_paused = AUTOGRAD.tape_paused
    outer_rng = grandom.get_rng_state()
    before = _state_now()
    try:
        grandom.set_rng_state(rng_state)
        AUTOGRAD.tape_nodes, AUTOGRAD.tape_enabled, AUTOGRAD.tape_paused = [], True, False
        with engine.watch_params() as used_replay:
            redone = fn(*inputs)
        seg_nodes = AUTOGRAD.tape_nodes
    except StaleTensorError:  # the segment freed memory it then tried to read: say why
        _check_generations(before)
        raise
    finally:
        AUTOGRAD.tape_nodes, AUTOGRAD.tape_enabled, AUTOGRAD.tape_paused = outer_nodes, outer_enabled, outer_paused
        grandom.set_rng_state(outer_rng)
    _check_generations(before)
    if set(used_replay) != set(used_first):
        warnings.warn(
            f"ag_checkpoint (the segment made at {where}): backward() re-ran the segment and it used "
            f"different parameters than in its forward run ({len(used_first)} parameter tensors, then "
            f"{len(used_replay)}). Its function most likely closes over a loop variable, such as `lyr` in "
            "`for lyr in layers: h = ag_checkpoint(lambda t: lyr(t), h)`: Python looks the variable up when "
            "the function runs, so at backward() time every such segment runs the loop's last layer, and "
            "the earlier layers get no gradient while the loss looks normal. Bind the value per iteration: "
            "`lambda t, lyr=lyr: lyr(t)` or `functools.partial(lyr.forward)`.",
            RuntimeWarning, stacklevel=user_stacklevel())

    seg_grads, seg_leaves = {redone.id: grad_out}, {}
    engine.walk(seg_nodes, seg_grads, seg_leaves)

    input_ids = {x.id for x in inputs if isinstance(x, AGTensor)}
    for tid, leaf in seg_leaves.items():
        if tid in input_ids:
            continue  # the caller's tensor: returned below, accumulated by the outer pass
        g = seg_grads[tid]
        dict.__setitem__(grads, tid, engine.accumulate(dict.get(grads, tid), g))
        leaves[tid] = leaf
    return [seg_grads.get(x.id) if x.requires_grad else None for x in inputs if isinstance(x, AGTensor)]
