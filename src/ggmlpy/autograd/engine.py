"""Applying primitives eagerly, recording them, and walking the tape backwards."""
from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from .. import random as grandom
from ..runtime.autograd_state import AUTOGRAD, hook_opened, hooks_open, setting
from ..runtime.state import STATE
from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from ..kernels import enabled as _kernels_on
from ..tensor import AGTensor, ag_tensor, same_device
from . import forward_ad as _fwd
from . import prims
from .call import SAVED_KEY, Call
from .rules import DERIVATIVE_RULES
from .tape import TapeNode, no_grad

if TYPE_CHECKING:
    from ..nn.module import Module

F32 = checked_lib.GGML_TYPE_F32
I32 = checked_lib.GGML_TYPE_I32
_LOW = (checked_lib.GGML_TYPE_F16, checked_lib.GGML_TYPE_BF16)


def f32_builder(fwd, params: dict, out_type: int, blas: bool = False, index_inputs: tuple = (), op: str = "",
                kernels: bool = False, stored_inputs: tuple = ()):
    """A graph builder computing in f32 whatever the storage dtype, and storing in `out_type`.
    With `blas` (the device has ggml's BLAS backend) an all-f32 product is built for it; with
    `kernels` (a CPU device) ggmlpy's fused kernels may be used (prims.cpu_kernels).

    Inputs are checked here, once per cached graph: ggml's float kernels abort the process on
    an i32 operand, and its row-gathering ones on float indices."""
    def build(ctx, *xs):
        check_operands(op, xs, index_inputs)
        cast = out_type != F32 or any(x.type in _LOW for x in xs)
        xs = as_f32(ctx, xs, stored_inputs)
        with prims.blas_products(blas and not cast), prims.cpu_kernels(kernels):  # BLAS: whole graphs of products only
            y = fwd(ctx, *xs, **params)
        return checked_lib.ggml_cast(ctx, y, out_type) if out_type != F32 else y
    return build


def check_operands(op: str, xs, index_inputs: tuple) -> None:
    """Float tensors where the rule computes, i32 where it takes indices: ggml's kernels abort
    the process on anything else."""
    for i, x in enumerate(xs):
        if (x.type == I32) != (i in index_inputs):
            what = "i32 indices" if i in index_inputs else "a floating-point tensor (f32, f16 or bf16)"
            raise GGMLError(f"{op or 'op'}: input {i + 1} must be {what}, got "
                            f"{'i32' if x.type == I32 else 'a float tensor'}")


def check_index_values(op: str, values, bound: int) -> None:
    """Indices must lie in [0, bound): ggml's gathering kernels read (or abort) out of range."""
    v = np.asarray(values)
    if v.size and (v.min() < 0 or v.max() >= bound):
        raise GGMLError(f"{op}: indices must lie in 0..{bound - 1}, got {int(v.min())} .. {int(v.max())}")


def _check_indices(rule, op, inputs, params) -> None:
    bound = rule.index_bound(params, [x.shape for x in inputs])
    for i in rule.index_inputs:
        check_index_values(op, inputs[i]._read() if inputs[i].storage.type == I32 else 0, bound)


def as_f32(ctx, xs, stored: tuple = ()) -> list:
    """Operands in f32: ops compute in f32 whatever the storage dtype, except the inputs `stored`
    names (a rule's stored_inputs: a product that takes its weight in the weight's own type)."""
    return [checked_lib.ggml_cast(ctx, x, F32) if x.type in _LOW and i not in stored else x for i, x in enumerate(xs)]


def current_trace():
    """This thread's Trace, or None."""
    return AUTOGRAD.trace


@contextlib.contextmanager
def trace_into(trace: Trace):
    """Make `trace` this thread's Trace in the block (graph_trace.tracing): it records every primitive
    applied, and every tensor read on the host, in this thread."""
    with hook_opened(), setting("trace", trace), setting("host_reads", trace.host_reads):
        yield trace


class Trace(list):
    """The primitives applied while tracing; the (start, end) ranges of them that ag_checkpoint
    segments applied, the random masks drawn (keep_mask), and which tensors were read on the host."""

    def __init__(self):
        super().__init__()
        self.segments: list = []
        self.random_inputs: list = []  # (mask tensor, shape, rate), in the order they were drawn
        self.host_reads: list = []


def keep_mask_values(shape, rate: float):
    """Inverted dropout's mask: (U > rate) / (1 - rate), U uniform from ggmlpy's random stream."""
    return (grandom.generator().uniform(size=shape) > rate) / (1.0 - rate)


def keep_mask(shape, rate: float, like: AGTensor) -> AGTensor:
    """A dropout mask on `like`'s device. Traced by ag_compile, it becomes an input of the compiled
    step that each call draws again, from the same stream in the same order as the eager forward,
    so a compiled and an eager run with the same seed drop the same units."""
    t = ag_tensor(keep_mask_values(shape, rate), device=like.device_context.spec)
    trace = current_trace()
    if trace is not None:
        trace.random_inputs.append((t, tuple(shape), float(rate)))
    return t


@contextlib.contextmanager
def watch_params():
    """Collect the ids of the trainable leaves the ops in this block read (used by ag_checkpoint)."""
    seen: set = set()
    watchers = AUTOGRAD.watchers
    watchers.append(seen)
    try:
        with hook_opened():
            yield seen
    finally:
        # by identity: a nested checkpoint's set may equal its outer one's, and list.remove
        # would take the outer's
        del watchers[next(i for i in range(len(watchers) - 1, -1, -1) if watchers[i] is seen)]


def _reshape_in_place(x: AGTensor, shape, out_type: int, dc):
    """A reshape of a pass-pool tensor (contiguous, of the output's type) as a view of its memory:
    no copy. Pass-pool tensors are never written after they are made, so sharing is safe; a reset
    moves each holder's tensor on its own. Persistent tensors (which optimizers update in place)
    are copied, as before."""
    s = x.storage
    if s.pool is not dc.pass_pool or s.type != out_type:
        return None
    if s.gen != s.pool.gen:
        s.check()  # raises StaleTensorError
    return s.reshaped(shape)


def apply(op: str, *inputs: AGTensor, **params) -> AGTensor:
    """Run primitive `op` on `inputs` through ggml; record it if any input needs a gradient."""
    rule = DERIVATIVE_RULES[op]
    dc = same_device(*inputs)
    if rule.index_bound is not None:
        _check_indices(rule, op, inputs, params)
    mode = AUTOGRAD  # this thread's modes (a threading.local)
    hooks = hooks_open()
    if hooks and mode.watchers:
        for x in inputs:
            if x.is_leaf and x.requires_grad:
                for w in mode.watchers:
                    w.add(x.id)
    out_type = STATE.dtype
    st = _reshape_in_place(inputs[0], params["shape"], out_type, dc) if op == "reshape" else None
    if st is None:
        kern = dc.backend.is_cpu and _kernels_on()
        key = (op, tuple(params.items()), out_type, kern)
        st = dc.executor.run(key, f32_builder(rule.fwd, params, out_type, dc.blas is not None, rule.index_inputs, op,
                                              kern, rule.stored_inputs), [x.storage for x in inputs],
                             dc.pass_pool.alloc)[0]
    out = AGTensor(st, st.spec[1], dc, is_leaf=False)  # the spec's ne: no reads through cffi
    if mode.tape_enabled and not mode.tape_paused and rule.vjp is not None and any(x.requires_grad for x in inputs):
        out.requires_grad = True
        saved = {SAVED_KEY[i]: inputs[i] for i in rule.saves if i < len(inputs)}  # optional inputs may be absent
        if rule.saves_out:
            saved["out"] = out
        mode.tape_nodes.append(TapeNode(op, out.id, [(x.id, x.requires_grad, x if x.is_leaf else None) for x in inputs],
                                    saved, params, tuple(x.shape for x in inputs)))
    if hooks and mode.trace is not None:  # before the tangents: their primitives read `out`
        mode.trace.append((op, inputs, params, out))
    if _fwd.LEVELS:
        _fwd.propagate(rule, out, inputs, params, apply)  # its JVP rule's primitives are applied here too
    return out


# -- backward --------------------------------------------------------------------------------------------
class GradMap(dict):
    """backward()'s result: gradients keyed by tensor id (as in ggmlR); also indexable by the tensor."""

    def __getitem__(self, key):
        return super().__getitem__(key.id if isinstance(key, AGTensor) else key)

    def get(self, key, default=None):
        return super().get(key.id if isinstance(key, AGTensor) else key, default)

    def __contains__(self, key):
        return super().__contains__(key.id if isinstance(key, AGTensor) else key)


def ones_like(x: AGTensor) -> AGTensor:
    return apply("fill", x, value=1.0)


def accumulate(a: AGTensor | None, b: AGTensor) -> AGTensor:
    return b if a is None else apply("add", a, b)


def backward(loss: AGTensor, grad: AGTensor | None = None, retain_all: bool = False) -> GradMap:
    """Gradients of `loss`, keyed by tensor id (as ggmlR's environment), also indexable by tensor;
    they are also added into the leaves' `.grad`.

    The map holds the gradients of the tape's inputs and leaves. An intermediate
    tensor's gradient is freed as soon as it has been pushed back, unless
    `retain_all` keeps every one (ggmlR keeps all)."""
    if not isinstance(loss, AGTensor):
        raise GGMLError(f"backward: expected an ag tensor, got {type(loss).__name__}")
    # Nothing recorded leads to this loss: ggmlR would return {loss: 1} and leave every .grad
    # unset, which looks like training and is not. Say why instead.
    if not loss.requires_grad:
        raise GGMLError("backward: nothing was recorded for this loss, so no gradient can reach any "
                        "parameter. Compute it inside `with with_grad_tape():` (not under no_grad()), from "
                        "tensors that need gradients (ag_param, or requires_grad=True)")
    if not loss.is_leaf and not any(n.out_id == loss.id for n in AUTOGRAD.tape_nodes):
        raise GGMLError("backward: this loss was recorded on an earlier tape, which a later "
                        "with_grad_tape() has cleared; call backward() before starting the next tape")
    if grad is not None:
        if not isinstance(grad, AGTensor):
            grad = ag_tensor(grad, device=loss.device_context.spec)
        if grad.shape != loss.shape:
            raise GGMLError(f"backward: grad has shape {list(grad.shape)}, but the output has shape "
                            f"{list(loss.shape)}; they must match")
        same_device(loss, grad)
        if grad.storage.type == I32:
            raise GGMLError("backward: grad must be a floating-point tensor, got i32")
    grads = GradMap()
    leaves = {}
    with no_grad():
        dict.__setitem__(grads, loss.id, grad if grad is not None else ones_like(loss))
        walk(AUTOGRAD.tape_nodes, grads, leaves, retain_all)
        for tid, leaf in leaves.items():
            g = dict.get(grads, tid)
            if g is not None:
                _add_into_grad(leaf, g)
    return grads


class EagerBackward:
    """How the walker computes eagerly: primitives applied to ag tensors now."""

    apply = staticmethod(apply)

    @staticmethod
    def slice_fast_path(node) -> bool:
        return not _fwd.LEVELS  # forward AD may differentiate the gradients again: no in-place sums

    @staticmethod
    def acc_into(cur, g, start):
        """cur[start:] += g in cur's own memory (ggml_acc), or None where that cannot be done."""
        if cur.storage.type != F32 or g.storage.type != F32:
            return None
        _acc_into(cur, g, start)
        return cur

    @staticmethod
    def emitted(g) -> None:
        pass

    @staticmethod
    def node_done(node, grads) -> None:
        pass


EAGER = EagerBackward()


def walk(nodes, grads: dict, leaves: dict, retain_all: bool = False, backward_impl=EAGER) -> None:
    """The one backward walker: push gradients from outputs to inputs through `nodes` (tape Nodes,
    in forward order), newest first. `backward_impl` computes: EAGER applies primitives now; graph_mode's
    emits graph nodes (the same rules, the same sums, the same slice fast path), and hears when
    each node is done (`node_done`: a gradient no later node adds to is final). A node with a
    `backward_fn` is a checkpointed segment, which replays itself (eagerly or as graph nodes)."""
    owned: dict = {}  # tid -> a gradient this walk made and nothing else holds: safe to add into
    for node in reversed(nodes):
        g = dict.get(grads, node.out_id) if retain_all else dict.pop(grads, node.out_id, None)
        owned.pop(node.out_id, None)  # handed on to the rule, which may pass it to several inputs
        if g is None:
            backward_impl.node_done(node, grads)
            continue
        if node.op == "slice" and node.backward_fn is None and backward_impl.slice_fast_path(node):
            _slice_backward(node, g, grads, leaves, owned, backward_impl)
            backward_impl.node_done(node, grads)
            continue
        if node.backward_fn is not None:  # a checkpoint: replays its segment
            in_grads = node.backward_fn(g, grads, leaves)
        else:
            in_grads = DERIVATIVE_RULES[node.op].vjp(g, Call(backward_impl.apply, node.saved, node.params, node.in_shapes))
        for (tid, needs, leaf), gi in zip(node.inputs, in_grads):
            if not needs or gi is None:
                continue
            prev = dict.get(grads, tid)
            total = gi if prev is None else backward_impl.apply("add", prev, gi)
            backward_impl.emitted(total)
            dict.__setitem__(grads, tid, total)
            if prev is None:
                owned.pop(tid, None)  # a rule's own result: it may be held elsewhere
            else:
                owned[tid] = total  # a fresh sum
            if leaf is not None:
                leaves[tid] = leaf
        backward_impl.node_done(node, grads)


def _slice_backward(node, g, grads, leaves, owned, backward_impl) -> None:
    """A slice's gradient added into its input's gradient where it lies: in place (ggml_acc) when
    the walk made that gradient itself, so n slices of one tensor cost one full-size pass, not n
    (a padded copy and a full-size sum each)."""
    tid, needs, leaf = node.inputs[0]
    if not needs:
        return
    cur = dict.get(grads, tid)
    start, shape = node.params["start"], node.in_shapes[0]
    total = None
    if cur is not None and owned.get(tid) is cur and tuple(cur.shape) == tuple(shape):
        total = backward_impl.acc_into(cur, g, start)
    if total is None:
        padded = backward_impl.apply("pad_into", g, start=start, shape=shape)
        total = padded if cur is None else backward_impl.apply("add", cur, padded)
    backward_impl.emitted(total)
    dict.__setitem__(grads, tid, total)
    owned[tid] = total
    if leaf is not None:
        leaves[tid] = leaf


def _acc_into(dst: AGTensor, g: AGTensor, start) -> None:
    """dst[start:start + g.shape] += g, in dst's own memory."""
    dst.device_context.executor.run(("acc_into", tuple(start)), lambda ctx, a, b: prims.acc_into(ctx, a, b, start),
                        [dst.storage, g.storage], None, out=[dst.storage])


def _add_into_grad(leaf: AGTensor, g: AGTensor) -> None:
    """Accumulate `g` into the leaf's `.grad`, a tensor of its own (held `.grad` tensors see
    later accumulation, as in PyTorch; backward()'s result never does).

    A first gradient is not copied: `.grad` starts on the pass-pool memory backward() computed
    it in (its own Storage on that memory), and the pool's reset moves it to the persistent
    pool only if it is still held then. A training loop that zeroes its gradients before the
    next tape never pays for the copy."""
    cur = leaf.grad
    if cur is None or not cur.storage.alive or cur.shape != leaf.shape:
        if g.storage.pool is not leaf.device_context.pass_pool:  # memory someone else updates: take a copy now
            cur = AGTensor(leaf.device_context.persistent.alloc(g.storage.type, leaf.shape), leaf.shape, leaf.device_context)
            assign(cur, g)
        else:
            cur = AGTensor(g.storage.alias(), leaf.shape, leaf.device_context)
        leaf.grad = cur
    elif cur.storage.pool is leaf.device_context.persistent:
        leaf.device_context.executor.run(("add_into",), f32_builder(prims.add, {}, cur.storage.type),
                             [cur.storage, g.storage], None, out=[cur.storage])
    else:  # still shares an earlier backward()'s result: accumulate into new memory
        cur.storage = leaf.device_context.executor.run(("add",), f32_builder(prims.add, {}, cur.storage.type),
                                      [cur.storage, g.storage], leaf.device_context.pass_pool.alloc)[0]


def assign(dst: AGTensor, src: AGTensor) -> None:
    """Write src's values into dst's own memory, on the device: how layer state (batch-norm
    running statistics) and optimizer state are updated, seen through every reference."""
    if AUTOGRAD.trace is not None:
        raise GGMLError("ag_compile: fn updates layer or optimizer state in place (batch-norm running "
                        "statistics?), which a compiled graph would not repeat; use eval mode, or eager mode")
    # (the executor keys in-place graphs on the destination's type too: f16 state is safe)
    dst.device_context.executor.run(("copy",), f32_builder(prims.copy, {}, dst.storage.type), [src.storage], None, out=[dst.storage])


def zero_grad(params: "Iterable[AGTensor] | Module") -> None:
    """Forget the `.grad` of every tensor in `params` (a list, or a model's parameters())."""
    params = list(params.parameters() if hasattr(params, "parameters") else params)
    for p in params:
        if not isinstance(p, AGTensor):
            raise GGMLError(f"zero_grad: expected ag tensors, got {type(p).__name__}")
    for p in params:
        p.grad = None
