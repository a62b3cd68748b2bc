"""The backward pass as ggml graph nodes: ggmlpy's rule table walked by the one walker
(engine.walk with `GraphBackward`: each VJP rule, written with primitives, emits nodes instead of
running), or ggml's own (`ggml_build_backward_expand`) where every forward op has one; a
checkpointed segment is emitted again for the backward, so its activations are not kept.
`ag_backward_graph(loss)` emits the backward of a recorded tape this way.
"""
from __future__ import annotations



from ..runtime.autograd_state import AUTOGRAD
from ..bindings import ffi
from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from ..tensor import AGTensor
from . import prims
from .engine import GradMap, _add_into_grad, walk
from .tape import TapeNode, no_grad
from .graph_trace import AutogradGraphBuilder, CompiledAutogradGraph, Sym, check_no_checkpoint, saved_of, sized

_NULL = ffi.NULL
F32 = checked_lib.GGML_TYPE_F32


# What ggml_build_backward_expand can differentiate without tripping one of its assertions
# (which abort the process): ops with a ggml backward, under the conditions checked in
# ggml_can_differentiate. Anything else makes ag_compile use ggmlpy's own rule table.
GGML_BACKWARD_OPS = {getattr(checked_lib, "GGML_OP_" + n) for n in (
    "NONE ADD SUB MUL DIV SQR SQRT LOG SUM SUM_ROWS MEAN REPEAT MUL_MAT SCALE CONT RESHAPE TRANSPOSE").split()}
GGML_BACKWARD_UNARY = {getattr(checked_lib, "GGML_UNARY_OP_" + n) for n in "ABS SGN NEG STEP RELU SILU EXP".split()}
_SAME_SHAPE_OPS = {checked_lib.GGML_OP_SUB, checked_lib.GGML_OP_MUL, checked_lib.GGML_OP_DIV}  # no broadcast backward in ggml


class GraphBackward:
    """How engine.walk computes when compiling: every primitive becomes a node of `builder`'s graph.

    With `in_order`, each gradient joins the graph as soon as it is made, so ggml computes in the
    walker's order: a checkpointed segment's recomputation lands right before the gradients that
    read it, and ggml's allocator (which frees a tensor after its last reader) never holds the
    first run's activations across the backward pass."""

    def __init__(self, builder: AutogradGraphBuilder, in_order: bool = False, on_final=None):
        self.b, self.in_order = builder, in_order
        self.on_final = on_final  # (id, gradient) for a wanted id once no node left adds to it
        self.readers: dict = {}  # wanted id -> outer nodes reading it that are still to be walked
        self.watched: set = set()  # those outer nodes (a segment's inner copies are not counted)

    def count_readers(self, nodes, wanted) -> None:
        for node in nodes:
            ids = {tid for tid, _, _ in node.inputs} & wanted
            if ids:
                self.watched.add(id(node))
                for tid in ids:
                    self.readers[tid] = self.readers.get(tid, 0) + 1

    def node_done(self, node, grads) -> None:
        """Every reader of a wanted id walked: its gradient is final, and every graph node that
        reads the id has joined the graph (in_order): it may be updated in place now."""
        if self.on_final is None or id(node) not in self.watched:
            return
        for tid in {tid for tid, _, _ in node.inputs}:
            left = self.readers.get(tid)
            if left is None:
                continue
            self.readers[tid] = left - 1
            if left == 1 and tid in grads:
                self.on_final(tid, grads[tid])

    def apply(self, op, *xs, **params) -> Sym:
        return self.b.emit(op, list(xs), params)

    @staticmethod
    def slice_fast_path(node) -> bool:
        return True

    def acc_into(self, cur: Sym, g: Sym, start) -> Sym:
        self.b.room(2)
        return Sym(prims.acc_into(self.b.ctx, cur.t, g.t, start), self.b.device_context)

    def emitted(self, g: Sym) -> None:
        if self.in_order:
            checked_lib.ggml_build_forward_expand(self.b.graph, g.t)


def emit_backward(builder: AutogradGraphBuilder, entries, seed: Sym, loss_id: int, wanted: set, segments=(),
                  on_final=None) -> dict:
    """ggmlpy's rule table as graph nodes, by the one walker (engine.walk): symbolic gradients of
    loss for the ids in `wanted`.

    `entries` are (op, input ids, input Syms, params, out id, out Sym, input shapes), in forward
    order; an input's Sym may be None when its rule does not read it. `segments`: (start, end)
    ranges of entries that ag_checkpoint ran; each becomes one node whose backward emits the
    segment's forward again from its inputs and walks that copy, so no gradient reads the first
    run's activations inside it. The last one is walked as it ran: its backward follows the loss's
    at once, so a replay would only recreate what the allocator still holds. `on_final(id, gradient)` hears of each wanted gradient as soon
    as it is final (the graph then computes in the walker's order), so an optimizer can update
    that parameter right away and its gradient need not wait for the others."""
    needs = set(wanted)
    for op, in_ids, _, _, out_id, _, _ in entries:  # which outputs lie on a path from a wanted input
        if any(i in needs for i in in_ids):
            needs.add(out_id)
    backward_impl = GraphBackward(builder, in_order=bool(segments) or on_final is not None, on_final=on_final)
    nodes, k = [], 0
    # The last segment's backward starts as soon as the loss's does: a replay would recreate what
    # the allocator still holds, for no memory saved, so it is walked as it ran.
    for start, end in _outermost(segments)[:-1]:
        nodes += [_node(e, needs) for e in entries[k:start]]
        nodes.append(_segment_node(entries[start:end], needs, backward_impl))
        k = end
    nodes += [_node(e, needs) for e in entries[k:]]
    backward_impl.count_readers(nodes, set(wanted))
    grads = {loss_id: seed}
    walk(nodes, grads, {}, backward_impl=backward_impl)
    return {tid: g for tid, g in grads.items() if tid in wanted}


def _node(entry, needs) -> TapeNode:
    op, in_ids, in_syms, params, out_id, out_sym, in_shapes = entry
    return TapeNode(op, out_id, [(i, i in needs, None) for i in in_ids], saved_of(in_syms, out_sym), params, in_shapes)


def _outermost(segments) -> list:
    """The segments not inside another (an inner one is recomputed as part of its outer one)."""
    out: list = []
    for start, end in sorted(segments, key=lambda se: (se[0], -se[1])):
        if out and start < out[-1][1]:
            continue
        if end > start:
            out.append((start, end))
    return out


def _segment_node(seg, needs, backward_impl: GraphBackward) -> TapeNode:
    """One node for a checkpointed segment: its inputs are what it reads from outside (the caller's
    tensors, parameters), its backward re-emits the segment from them and walks the copy."""
    made = {e[4] for e in seg}
    ext = list(dict.fromkeys(i for e in seg for i in e[1] if i not in made))

    def replay(g, grads, leaves):
        remap: dict = {}
        inner = []
        for op, in_ids, in_syms, params, out_id, _, in_shapes in seg:
            xs = [remap.get(i, x) for i, x in zip(in_ids, in_syms)]
            out = remap[out_id] = backward_impl.apply(op, *xs, **params)
            inner.append(TapeNode(op, out_id, [(i, i in needs, None) for i in in_ids], saved_of(xs, out), params,
                              in_shapes))
        seg_grads = {seg[-1][4]: g}
        walk(inner, seg_grads, {}, backward_impl=backward_impl)
        return [seg_grads.get(i) for i in ext]

    return TapeNode(None, seg[-1][4], [(i, i in needs, None) for i in ext], {}, {}, (), backward_fn=replay)


# -- ag_backward_graph: the backward of a recorded tape, as one graph ---------------------------------------
def ag_backward_graph(loss: AGTensor) -> "GradMap":
    """Like backward(loss), but the whole backward pass runs as one ggml graph."""
    if not isinstance(loss, AGTensor):
        raise GGMLError(f"ag_backward_graph: expected an ag tensor, got {type(loss).__name__}")
    nodes = AUTOGRAD.tape_nodes
    check_no_checkpoint(nodes)
    plan, outs, leaves = sized(lambda n, ext: _backward_plan(loss, nodes, n, ext), len(nodes),
                                sum(len(n.inputs) for n in nodes))
    dc = loss.device_context
    result = GradMap()
    for tid, st in outs.items():
        dict.__setitem__(result, tid, AGTensor(st, st.spec[1], dc, is_leaf=False))
    with no_grad():
        for tid, leaf in leaves.items():
            if tid in result:
                _add_into_grad(leaf, result[tid])
    return result


def _backward_plan(loss, nodes, n_tensors, n_external):
    """The backward graph of `nodes`, computed: (plan, {leaf id: gradient storage}, leaves)."""
    dc = loss.device_context
    b = AutogradGraphBuilder(dc, n_tensors, n_external=n_external)
    syms, leaves, storages, placeholders = {}, {}, [], []

    def sym_of(t: AGTensor) -> Sym:  # a snapshot: bound as an input of the graph
        s = syms.get(t.id)
        if s is None:
            s = syms[t.id] = b.placeholder(t.storage.type, t.shape)
            placeholders.append(s.t)
            storages.append(t.storage)
        return s

    entries = []
    for n in nodes:
        in_syms = []
        for i, (tid, _, leaf) in enumerate(n.inputs):
            saved = n.saved.get(f"x{i}")
            in_syms.append(sym_of(saved) if saved is not None else None)
            if leaf is not None:
                leaves[tid] = leaf
        out_sym = sym_of(n.out) if "out" in n.saved else None
        entries.append((n.op, [tid for tid, _, _ in n.inputs], in_syms, n.params, n.out_id, out_sym, n.in_shapes))
    wanted = set(leaves)
    seed = b.emit("fill", [sym_of(loss)], {"value": 1.0})
    grads = emit_backward(b, entries, seed, loss.id, wanted)
    outs = {}
    for tid, gs in grads.items():
        b.room(2)
        st = dc.pass_pool.alloc(F32, gs.shape)
        final = checked_lib.ggml_cpy(b.ctx, gs.t, st.t)  # into pass-pool memory the caller can keep
        checked_lib.ggml_build_forward_expand(b.graph, final)
        outs[tid] = st
    if not outs:  # no leaf gets a gradient: an empty graph (ggml would compute it from freed memory)
        return None, outs, leaves
    plan = CompiledAutogradGraph(b, placeholders, dc)
    plan.run(storages)
    return plan, outs, leaves


def ggml_can_differentiate(b: AutogradGraphBuilder) -> bool:
    n = checked_lib.ggml_graph_n_nodes(b.graph)
    uses: dict = {}
    for i in range(n):
        p = checked_lib.ggml_graph_node(b.graph, i)
        for j in range(10):
            src = p.src[j]
            if src != _NULL and src.flags & checked_lib.GGML_TENSOR_FLAG_PARAM:
                key = int(ffi.cast("uintptr_t", src))
                uses[key] = uses.get(key, 0) + 1
                # ggml sums a parameter's gradients as transposed views, which its CPU add
                # kernel cannot read: a parameter used twice takes the rule-table path
                if uses[key] > 1:
                    return False
        if p.type != F32:
            return False
        if p.op == checked_lib.GGML_OP_UNARY:
            if checked_lib.ggml_get_unary_op(p) not in GGML_BACKWARD_UNARY:
                return False
        elif p.op not in GGML_BACKWARD_OPS:
            return False
        if p.op in _SAME_SHAPE_OPS and list(p.src[0].ne) != list(p.src[1].ne):
            return False
        if p.op == checked_lib.GGML_OP_MUL_MAT and (p.src[0].ne[2] != 1 or p.src[1].ne[2] != 1 or p.src[0].ne[3] != 1):
            return False
        # CONT's backward asserts on non-contiguous gradients; the one safe pattern here is a
        # weight's cont(transpose(W)) feeding a matrix product.
        if p.op == checked_lib.GGML_OP_CONT:
            src = p.src[0]
            if src.op != checked_lib.GGML_OP_TRANSPOSE or src.src[0].op != checked_lib.GGML_OP_NONE:
                return False
    return True


def ggml_backward(b: AutogradGraphBuilder, loss_sym: Sym, params: dict) -> dict:
    """ggml's own reverse mode over the forward graph built so far."""
    checked_lib.ggml_set_loss(loss_sym.t)
    n = checked_lib.ggml_graph_n_nodes(b.graph)
    b.room(12 * n + 64)  # ggml's backward makes a few tensors per node (gradients, accumulators)
    accs = ffi.new("struct ggml_tensor *[]", n)
    one = b.device_context.persistent.alloc(F32, (1, 1))  # d loss / d loss, kept alive by the builder
    b.device_context.sync()  # a recycled buffer: queued ops may still read it
    checked_lib.ggml_backend_tensor_set(one.t, ffi.new("float *", 1.0), 0, 4)
    b.keep = [one]
    for i in range(n):
        if checked_lib.ggml_graph_node(b.graph, i) == loss_sym.t:
            accs[i] = _reshape_like(b, one.t, loss_sym.t)
    checked_lib.ggml_build_backward_expand(b.ctx, b.graph, accs)
    out = {}
    for tid, p in params.items():
        g = checked_lib.ggml_graph_get_grad(b.graph, p.storage.t)
        if g != _NULL:
            if not checked_lib.ggml_is_contiguous(g):  # e.g. a transposed view: the optimizer kernels need rows
                g = checked_lib.ggml_cont(b.ctx, g)
            out[tid] = Sym(g, b.device_context)
    return out


def _reshape_like(b, t, like):
    return t if list(t.ne) == list(like.ne) else checked_lib.ggml_reshape_4d(b.ctx, t, *[int(x) for x in like.ne])
