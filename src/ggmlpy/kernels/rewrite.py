"""Graph rewrites onto the kernels, in place: ggml's own nodes (products, im2col's gradient) made
the kernels' (`adopt`), packed linear layers chained so each prefetches the next one's weights
(`chain_linears`), and which kernel nodes may compute over their own input (`overwrites_input`)."""
from __future__ import annotations

from ..bindings import ffi, lib
from .loader import loaded
from .nodes import N_TASKS_MAX, Kernels, _gemm_operand, gemm_fits


def adopt(k: Kernels, ctx) -> int:
    """Turn the nodes among the tensors of context `ctx` that ggmlpy has a faster CPU kernel
    for into that kernel's node, in place; returns how many. f32 products (MUL_MAT, OUT_PROD)
    become gemm nodes (a transposed view read through its source); im2col's gradient
    (IM2COL_BACK, 2-D) becomes conv.c's, which sums in ggml's order (the same bits); ggml's
    cross-entropy loss becomes kernels.c's, on one thread (ggml's own result follows its
    thread count: kernels/pieces.h).

    For graphs whose nodes ggml makes itself: ggml's backward pass has no rule for a custom
    op, so a graph it differentiates is built with ggml's ops and adopted afterwards, its
    backward nodes included. Each node keeps its shape, memory and readers; only its op and
    operands change. Call it before the graph is allocated or scheduled: only the CPU
    backend runs these nodes. Nodes whose operands the kernels cannot read as they are stay
    ggml's."""
    nodes = []
    t = lib.ggml_get_first_tensor(ctx)
    while t != ffi.NULL:
        nodes.append(t)
        t = lib.ggml_get_next_tensor(ctx, t)
    return adopt_nodes(k, nodes)


def adopt_nodes(k: Kernels, nodes) -> int:
    """adopt() for the given nodes (ggml tensors of any context: a ggml_opt context's loss, which
    ggml makes in a context of its own); the others are left as they are."""
    nodes = [t for t in nodes if t != ffi.NULL and t.type == lib.GGML_TYPE_F32 and t.op in _ADOPTERS]
    if not nodes:
        return 0
    # each kernel's node is made in a scratch context, and its op and op parameters (the
    # kernel's function pointer, task count and userdata, in ggml's own layout) copied over
    params = ffi.new("struct ggml_init_params *", {"mem_size": (len(nodes) + 1) * lib.ggml_tensor_overhead(),
                                                   "mem_buffer": ffi.NULL, "no_alloc": True})
    scratch = lib.ggml_init(params[0])
    if scratch == ffi.NULL:
        raise MemoryError("Kernels.adopt: ggml_init failed")
    adopted = 0
    try:
        for t in nodes:
            made = _ADOPTERS[t.op](k, scratch, t)
            if made is None or list(made[0].ne) != list(t.ne):  # the same shape, never expected otherwise
                continue
            node, srcs = made
            t.op = node.op
            ffi.memmove(t.op_params, node.op_params, ffi.sizeof(t.op_params))
            for i in range(len(t.src)):
                t.src[i] = srcs[i] if i < len(srcs) else ffi.NULL
            adopted += 1
    finally:
        lib.ggml_free(scratch)
    return adopted

def _adopt_product(k: Kernels, scratch, t):
    """(gemm node, its operands) computing product node t, or None."""
    if k.gemm is None:
        return None
    a, b = _gemm_operand(t.src[0]), _gemm_operand(t.src[1])
    if a is None or b is None or not gemm_fits(a[0], b[0]):
        return None
    # MUL_MAT is t(a) %*% b, OUT_PROD a %*% t(b); an operand read through its source flips
    ta = (t.op == lib.GGML_OP_MUL_MAT) != a[1]
    tb = (t.op == lib.GGML_OP_OUT_PROD) != b[1]
    return k._gemm_node(scratch, a[0], b[0], ta, tb), (a[0], b[0])

def _adopt_im2col_back(kern: Kernels, scratch, t):
    """(conv.c's node, its operand) computing IM2COL_BACK node t (2-D, contiguous), or None."""
    g, k = t.src[0], t.src[1]
    s0, s1, p0, p1, d0, d1, is_2d = (int(t.op_params[i]) for i in range(7))
    if kern._im2col_back_fn is None or not is_2d or g.type != lib.GGML_TYPE_F32 or not lib.ggml_is_contiguous(g) \
            or not lib.ggml_is_contiguous(t) or min(s0, s1, d0, d1) < 1:
        return None
    params = kern._userdata((int(k.ne[0]), int(k.ne[1]), s0, s1, p0, p1, d0, d1), "im2col_back")
    node = lib.ggml_custom_4d(scratch, lib.GGML_TYPE_F32, t.ne[0], t.ne[1], t.ne[2], t.ne[3],
                              ffi.new("struct ggml_tensor *[1]", [g]), 1, kern._im2col_back_fn, N_TASKS_MAX, params)
    return node, (g,)


def _adopt_cross_entropy(k: Kernels, scratch, t):
    """(kernels.c's node, its operands) computing CROSS_ENTROPY_LOSS node t on one thread, whose
    result the thread count never changes (ggml's adds its threads' partial sums), or None."""
    logits, labels = t.src[0], t.src[1]
    if logits.type != lib.GGML_TYPE_F32 or labels.type != lib.GGML_TYPE_F32 or logits.nb[0] != 4 or labels.nb[0] != 4:
        return None
    node = lib.ggml_custom_4d(scratch, lib.GGML_TYPE_F32, 1, 1, 1, 1, ffi.new("struct ggml_tensor *[2]", [logits, labels]),
                              2, k._cross_entropy_fn, 1, ffi.NULL)
    return node, (logits, labels)


_ADOPTERS = {lib.GGML_OP_MUL_MAT: _adopt_product, lib.GGML_OP_OUT_PROD: _adopt_product,
             lib.GGML_OP_IM2COL_BACK: _adopt_im2col_back, lib.GGML_OP_CROSS_ENTROPY_LOSS: _adopt_cross_entropy}


def chain_linears(k: Kernels, graph) -> None:
    """Give each packed linear layer's node of `graph` the next one's weights (in the graph's order)
    as one more argument, whose first block the node fetches into L2 as it finishes (conv.c): that
    block would otherwise come from L3 or memory while the next node waits. Run once the graph is
    built: its order is the order of computing. Weights are constant leaves of the graph, so the
    extra argument moves no node and allocates nothing."""
    prev, packed = None, int(ffi.cast("uintptr_t", k._packed_fn))
    for i in range(lib.ggml_graph_n_nodes(graph)):
        t = lib.ggml_graph_node(graph, i)
        if t.op != lib.GGML_OP_CUSTOM or int(ffi.cast("uintptr_t", ffi.cast("void **", t.op_params)[0])) != packed:
            continue
        if prev is not None:
            prev.src[_packed_arg_count(prev)] = t.src[0]
        prev = t


def _packed_arg_count(node) -> int:
    """A packed linear node's own arguments: weights, x, then the bias and the residual where its
    flags (userdata's first int; ggml_custom_op_params: fun, n_tasks, userdata) say."""
    flags = ffi.cast("int32_t *", ffi.cast("void **", node.op_params)[2])[0]
    return 2 + (flags & 1) + (flags >> 2 & 1)


def overwrites_input(node) -> bool:
    """Whether `node` is an element-wise map of these kernels that may be computed over its own
    input (element i read before it is written, and no other): today the ReLU."""
    k = loaded()
    if k is None or node.op != lib.GGML_OP_MAP_CUSTOM1:
        return False
    fun = ffi.cast("void **", node.op_params)[0]  # ggml_map_custom1_op_params' first field
    return int(ffi.cast("uintptr_t", fun)) == int(ffi.cast("uintptr_t", k._relu))
