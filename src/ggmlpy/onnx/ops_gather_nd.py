"""GatherND: slices of the data picked by index tuples, as one ggml_get_rows.

data of shape D, indices of shape I = (batch..., m..., q) with `batch_dims` leading axes shared:
every index tuple names a row of data seen as (prod(D[:batch_dims + q]), prod(D[batch_dims + q:]))
(the batch's offset plus the tuple's position in D[batch_dims:batch_dims + q]); the output,
I[:-1] + D[batch_dims + q:], is those rows. Constant indices give the row numbers at load time;
computed ones are turned into row numbers in the graph (float32, exact below 2**24 rows), and a
tuple out of range gives NaN rows (a graph cannot raise), as GatherElements does.
"""
from __future__ import annotations

import numpy as np

from .graph import Val
from .layout import reshape
from .op_table import f, op
from .onnx_lib import onnx_lib


def _geometry(b, x: Val, ind: Val, bd: int):
    b.need(ind.rank >= 1 and 0 <= bd < min(x.rank, ind.rank), f"batch_dims {bd} for data of rank {x.rank} "
                                                              f"and indices of rank {ind.rank}")
    q = ind.shape[-1]
    b.need(1 <= q <= x.rank - bd, f"index tuples of {q} for data of rank {x.rank} (batch_dims {bd})")
    b.need(ind.shape[:bd] == x.shape[:bd], f"indices' batch axes {list(ind.shape[:bd])} differ from data's "
                                           f"{list(x.shape[:bd])}")
    lens = np.array(x.shape[bd:bd + q], dtype=np.int64)
    strides = np.array([int(np.prod(lens[j + 1:], dtype=np.int64)) for j in range(q)], dtype=np.int64)
    B = int(np.prod(x.shape[:bd], dtype=np.int64))
    M = int(np.prod(ind.shape[:-1], dtype=np.int64))
    per_batch = int(np.prod(lens, dtype=np.int64))
    base = np.repeat(np.arange(B, dtype=np.int64) * per_batch, M // B)  # each tuple's batch offset
    return q, lens, strides, base, M


@op("GatherND")
def _gather_nd(b, node, ins, at):
    x, ind = ins
    bd = int(at.get("batch_dims", 0))
    q, lens, strides, base, M = _geometry(b, x, ind, bd)
    inner = int(np.prod(x.shape[bd + q:], dtype=np.int64))
    R = x.size // inner
    out_shape = ind.shape[:-1] + x.shape[bd + q:]
    rows = reshape(b, b.tensor(x), (R, inner))
    c = b.ctx
    if ind.is_const:
        idx = np.asarray(ind.const, dtype=np.int64).reshape(M, q)
        b.need(((idx >= -lens) & (idx < lens)).all(), f"indices out of range of the data's axes {list(lens)}")
        idx = np.where(idx < 0, idx + lens, idx)
        y = onnx_lib.ggml_get_rows(c, rows, b.weight(base + idx @ strides, onnx_lib.GGML_TYPE_I32))
        return [b.out(reshape(b, y, out_shape), out_shape, x.dtype)]
    b.limit(R < 2 ** 24, "GatherND with computed indices into more than 2**24 rows")
    add, mul, neg, step = onnx_lib.ggml_add, onnx_lib.ggml_mul, onnx_lib.ggml_neg, onnx_lib.ggml_step
    L = b.weight(lens.astype(np.float32))  # ne [q]: broadcast over the M tuples
    last = b.weight((lens - 1).astype(np.float32))
    i = reshape(b, f(b, ind), (M, q))
    i = add(c, i, mul(c, step(c, neg(c, i)), L))  # negatives wrap
    ok = mul(c, step(c, onnx_lib.ggml_scale_bias(c, i, 1.0, 1.0)), step(c, add(c, neg(c, i), L)))  # 0 <= i < L
    i = onnx_lib.ggml_relu(c, i)
    i = add(c, neg(c, onnx_lib.ggml_relu(c, add(c, neg(c, i), last))), last)  # min(i, L - 1)
    flat = onnx_lib.ggml_sum_rows(c, mul(c, i, b.weight(strides.astype(np.float32))))  # ne [1, M]
    flat = add(c, flat, b.weight(base.astype(np.float32).reshape(M, 1)))
    y = onnx_lib.ggml_get_rows(c, rows, onnx_lib.ggml_cast(c, reshape(b, flat, (M,)), onnx_lib.GGML_TYPE_I32))
    bad = onnx_lib.ggml_sum_rows(c, onnx_lib.ggml_scale_bias(c, ok, -1.0, 1.0))  # ne [1, M]: components out of range
    good = step(c, onnx_lib.ggml_scale_bias(c, bad, -1.0, 0.5))
    y = mul(c, y, onnx_lib.ggml_div(c, good, good))  # y: ne [inner, M]; times 1, or 0/0 = NaN out of range
    return [b.out(reshape(b, y, out_shape), out_shape, x.dtype)]
