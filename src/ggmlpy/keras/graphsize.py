"""How big a model's training graphs are, counted before ggml is asked to build them.

ggml aborts the process when a graph or a context overflows, so every size is counted or
bounded here first. `ggml_opt_init` builds its static graphs (forward; forward + backward;
forward + backward + optimizer steps) with ggml's fixed GGML_DEFAULT_GRAPH_SIZE, and copies
the one it runs into a context of that many tensors: a model whose step graph does not fit
there trains on ggml_opt's other mode, graphs the caller builds (`ggml_opt_prepare_alloc`),
sized here from the model.
"""
from __future__ import annotations

from ..bindings import ffi
from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..errors import GGMLError
from ..graph import free_context, new_context

STATIC_GRAPH_SIZE = 2048     # GGML_DEFAULT_GRAPH_SIZE: ggml_opt_init's static graphs and their copies
STATIC_MARGIN = 16           # tensors of ggml_opt's own besides those counted here
# ggml's backward pass creates a bounded number of tensors per forward tensor: the whole step
# graph holds at most 2.6 times the forward pass's tensors on every model of tests/test_keras.py
# (all layer kinds, both losses, multi-output); the probe gets nearly ten times that
BACKWARD_FACTOR = 24
MAX_GRAPH_NODES = 1 << 18    # the largest step graph (nodes + leafs) ggmlpy builds


def ctx_tensors(ctx, leafs_only: bool = False) -> int:
    """Number of tensors in a ggml context (with leafs_only, those a graph lists as leafs:
    no op, not a parameter)."""
    n, t = 0, checked_lib.ggml_get_first_tensor(ctx)
    while t != ffi.NULL:
        if not leafs_only or (t.op == checked_lib.GGML_OP_NONE and not t.flags & checked_lib.GGML_TENSOR_FLAG_PARAM):
            n += 1
        t = checked_lib.ggml_get_next_tensor(ctx, t)
    return n


def too_big(what: int, limit: int = None):
    limit = MAX_GRAPH_NODES if limit is None else limit
    return GGMLError(f"the model is too big to train: its step graph needs about {what} nodes, more than "
                     f"ggmlpy's limit of {limit} (ggmlpy.keras.graphsize.MAX_GRAPH_NODES)")


def forward_bound(b) -> int:
    """An upper bound of a forward graph's nodes + leafs: every tensor of the builder."""
    return ctx_tensors(b.ctx) + ctx_tensors(b.ctx_w)


def _loss_nodes(ctx, out, loss_type):
    """The loss ggml_opt adds on top of `out` (ggml_opt_build), in a scratch context."""
    if loss_type == checked_lib.GGML_OPT_LOSS_TYPE_CROSS_ENTROPY:
        labels = checked_lib.ggml_dup_tensor(ctx, out)
        loss = checked_lib.ggml_cross_entropy_loss(ctx, out, labels)
        extra = [checked_lib.ggml_count_equal(ctx, checked_lib.ggml_argmax(ctx, out), checked_lib.ggml_argmax(ctx, labels))]
    elif loss_type == checked_lib.GGML_OPT_LOSS_TYPE_MEAN_SQUARED_ERROR:
        labels = checked_lib.ggml_dup_tensor(ctx, out)
        loss = checked_lib.ggml_scale(ctx, checked_lib.ggml_sum(ctx, checked_lib.ggml_sqr(ctx, checked_lib.ggml_sub(ctx, out, labels))), 1.0)
        extra = []
    else:
        loss = checked_lib.ggml_scale(ctx, checked_lib.ggml_sum(ctx, out), 1.0)
        extra = []
    return loss, extra


def step_graph_size(b, out, loss_type, n_params: int, adamw: bool) -> int:
    """nodes + leafs of ggml_opt's optimizer-step graph for a model whose loss input is `out`
    (a tensor of builder `b`): the forward pass, ggml_opt's loss, ggml's backward pass (built
    in a scratch context, so the model's own tensors are untouched) and one optimizer step
    per parameter tensor with its moments. GGMLError when even the probe would be too big."""
    bound = forward_bound(b) + 16
    size = BACKWARD_FACTOR * bound + 1024
    if size > MAX_GRAPH_NODES * 4:
        raise too_big(bound * 3)
    ctx = new_context(size, 3 * checked_lib.ggml_graph_overhead_custom(size, True))
    try:
        gf = checked_lib.ggml_new_graph_custom(ctx, size, True)
        loss, extra = _loss_nodes(ctx, out, loss_type)
        checked_lib.ggml_set_loss(loss)
        checked_lib.ggml_build_forward_expand(gf, loss)
        for t in extra:
            checked_lib.ggml_build_forward_expand(gf, t)
        gb = checked_lib.ggml_graph_dup(ctx, gf, True)
        checked_lib.ggml_build_backward_expand(ctx, gb, ffi.NULL)
        # ggml has no getter for a graph's leafs: every leaf-like tensor of the three contexts
        # bounds them (the model's are nearly all used)
        leafs = sum(ctx_tensors(c, leafs_only=True) for c in (b.ctx, b.ctx_w, ctx))
        n = checked_lib.ggml_graph_n_nodes(gb) + leafs
    finally:
        free_context(ctx)
    # per parameter: its optimizer step (a node) and, for AdamW, two moment tensors; the
    # optimizer's settings tensor; the loss gradient's accumulator
    return int(n) + n_params * (3 if adamw else 1) + 2


def fits_static(n: int) -> bool:
    """Whether ggml_opt's static graphs (and the context it copies them into) hold `n` tensors."""
    return n + STATIC_MARGIN <= STATIC_GRAPH_SIZE


def dynamic_size(n: int) -> int:
    """The graph size for a step graph of `n` nodes + leafs built by the caller; GGMLError past the cap."""
    size = n + n // 4 + 256
    if size > MAX_GRAPH_NODES:
        raise too_big(n)
    return size
