"""Forward builders of the differentiable primitives, as ggml graph fragments.

Each builder takes a ggml context and the input tensors (f32, R shapes: ne =
[nrow, ncol], then up to two batch axes) and returns the output tensor. Axes
past the first two are batches: products, softmax and the reductions act on
each [nrow, ncol] slice. They are the only place that knows
how an R-level operation maps onto ggml ops; the executor compiles and caches
them, and graph mode (later) emits them into one big graph.
"""
from __future__ import annotations

from .. import kernels
from ..bindings import ffi
from ..core.checked import checked_lib  # ggml's shape rules checked before each op (no abort)
from ..runtime.autograd_state import AUTOGRAD, setting

F32 = checked_lib.GGML_TYPE_F32


def blas_products(enabled: bool = True):
    """Build products for ggml's BLAS backend: see matmul()."""
    return setting("blas_products", enabled)


# -- ggmlpy's fused CPU kernels (ggmlpy.kernels) -----------------------------------------------
def cpu_kernels(enabled: bool = True):
    """Build GELU and its backward as ggmlpy's fused C kernels, and products as its OpenBLAS
    product op (ggml custom ops), where they are loaded. Set by the graph builders that know
    the device: custom ops run on ggml's CPU backend only."""
    return setting("cpu_kernels", enabled)


def _kernels(*xs):
    """ggmlpy.kernels' builders where this graph may use them on these operands (f32, one shape)."""
    if not AUTOGRAD.cpu_kernels or any(x.type != F32 or _ne(x) != _ne(xs[0]) for x in xs):
        return None
    return kernels.get()



def _t(ctx, x):
    return checked_lib.ggml_cont(ctx, checked_lib.ggml_transpose(ctx, x))


def _gemm(a, b):
    """ggmlpy.kernels' product builder where this graph may use it on these operands."""
    if not AUTOGRAD.cpu_kernels or a.type != F32 or b.type != F32:
        return None
    k = kernels.get()
    return None if k is None or not kernels.gemm_fits(a, b) else k.gemm


def matmul(ctx, a, b, ta=False, tb=False):
    """op(a) %*% op(b), batched over the axes past the first two.
    Under cpu_kernels(), one OpenBLAS product in any orientation (ggmlpy.kernels.gemm): no copies.
    Otherwise ggml_mul_mat(x, y), which computes
    t(x) %*% y with x, y sharing ne0 (x's batch broadcasting over y's), so a %*% b costs ggml's
    CPU kernels a transposed copy of a, and a %*% t(b) two copies, each costing a good part of
    the product itself (docs/benchmarks.md).
    Under blas_products(), 2-D products become ggml_out_prod(a, op(b)ᵀ), which ggml's BLAS
    backend computes from the transposed view in place, faster than copy and product."""
    batched = _batch(a) != (1, 1) or _batch(b) != (1, 1)
    if not tb and _batch(a) == (1, 1) and batched and checked_lib.ggml_is_contiguous(b):
        # a 2-D weight times a batch: one product over all the batch's columns
        out = matmul(ctx, a, checked_lib.ggml_reshape_2d(ctx, b, b.ne[0], b.ne[1] * b.ne[2] * b.ne[3]), ta, False)
        return checked_lib.ggml_reshape_4d(ctx, out, out.ne[0], b.ne[1], b.ne[2], b.ne[3])
    gemm = _gemm(a, b)
    if gemm is not None:
        return gemm(ctx, a, b, ta, tb)
    if batched and not all(nb % na == 0 for na, nb in zip(_batch(a), _batch(b))):
        # b's batch broadcasts over a's: compute the transposed product, op(b)ᵀ op(a)ᵀ
        return _t(ctx, matmul(ctx, b, a, ta=not tb, tb=not ta))
    if not batched and not ta and AUTOGRAD.blas_products and min(a.ne[0], a.ne[1], b.ne[0], b.ne[1]) >= 32:
        return checked_lib.ggml_out_prod(ctx, a, b if tb else checked_lib.ggml_transpose(ctx, b))
    return checked_lib.ggml_mul_mat(ctx, a if ta else _t(ctx, a), _t(ctx, b) if tb else b)


def _batch(x) -> tuple:
    return int(x.ne[2]), int(x.ne[3])


def add(ctx, a, b):
    return checked_lib.ggml_add(ctx, a, _widen(ctx, b, a))  # b broadcasts (ggml repeats the second operand)


def sub(ctx, a, b):
    return checked_lib.ggml_sub(ctx, a, _widen(ctx, b, a))


def mul(ctx, a, b):
    return checked_lib.ggml_mul(ctx, a, _widen(ctx, b, a)) if _covers(a, b) else checked_lib.ggml_mul(ctx, b, _widen(ctx, a, b))


def div(ctx, a, b):
    if _covers(a, b):
        return checked_lib.ggml_div(ctx, a, _widen(ctx, b, a))
    return checked_lib.ggml_div(ctx, checked_lib.ggml_repeat_4d(ctx, a, *_ne(b)), b)


def _ne(x) -> list:
    return [int(n) for n in x.ne]


def _widen(ctx, small, big):
    """ggml broadcasts a one-element-wide operand one element per call (a 256x256 times a
    1x1 costs some thirty times a same-shape multiply), and its repeat copies one element per
    call on one thread: a scalar is repeated to one full row (cheap), which then broadcasts at
    full speed; a row of per-column values [1, n...] becomes full size as an outer product with
    ones (all threads, or BLAS), faster than repeat."""
    if small.ne[0] == 1 and big.ne[0] > 1:
        n = int(small.ne[1] * small.ne[2] * small.ne[3])
        if n <= 64:
            return checked_lib.ggml_repeat_4d(ctx, small, big.ne[0], small.ne[1], small.ne[2], small.ne[3])
        if not checked_lib.ggml_is_contiguous(small):
            small = checked_lib.ggml_cont(ctx, small)
        full = checked_lib.ggml_out_prod(ctx, _ones(ctx, big.ne[0]), checked_lib.ggml_reshape_2d(ctx, small, n, 1))
        return checked_lib.ggml_reshape_4d(ctx, full, big.ne[0], small.ne[1], small.ne[2], small.ne[3])
    return small


def _ones(ctx, n):
    """A column [n, 1] of ones made in the graph (no host constant)."""
    return checked_lib.ggml_reshape_2d(ctx, checked_lib.ggml_scale_bias(ctx, checked_lib.ggml_arange(ctx, 0.0, float(n), 1.0), 0.0, 1.0), n, 1)


def _covers(a, b) -> bool:
    return all(a.ne[i] >= b.ne[i] for i in range(4))


def scale(ctx, x, s):
    return checked_lib.ggml_scale(ctx, x, s)


def add_scalar(ctx, x, c):
    return checked_lib.ggml_scale_bias(ctx, x, 1.0, c)


def neg(ctx, x):
    return checked_lib.ggml_neg(ctx, x)


def unary(ctx, x, fn):
    if fn == "gelu_erf" and (k := _kernels(x)) is not None:
        return k.gelu(ctx, x)
    return getattr(checked_lib, "ggml_" + fn)(ctx, x)


def relu(ctx, x):
    """max(x, 0), NaN kept, relu(-inf) = 0: the one ReLU of every front end (kernels.relu)."""
    return kernels.relu(ctx, x, _kernels(x))


def add_relu(ctx, a, b):
    """relu(a + b), b broadcast: a linear layer's bias and relu as one graph (one eager launch)."""
    return relu(ctx, add(ctx, a, b))


def where_positive(ctx, g, y):
    """g where y > 0, else 0: relu's backward, as one graph (step, then mul) instead of two."""
    return checked_lib.ggml_mul(ctx, g, checked_lib.ggml_step(ctx, y))


def pow_(ctx, x, p):
    """x^p as R computes it: exact special cases, sign kept for odd integer powers."""
    if p == 1:
        return checked_lib.ggml_scale(ctx, x, 1.0)
    if p == 2:
        return checked_lib.ggml_sqr(ctx, x)
    if p == 0.5:
        return checked_lib.ggml_sqrt(ctx, x)
    if p == 0:
        return checked_lib.ggml_scale_bias(ctx, x, 0.0, 1.0)
    mag = checked_lib.ggml_exp(ctx, checked_lib.ggml_scale(ctx, checked_lib.ggml_log(ctx, checked_lib.ggml_abs(ctx, x)), p))
    if float(p).is_integer():
        return checked_lib.ggml_mul(ctx, mag, checked_lib.ggml_sgn(ctx, x)) if int(p) % 2 else mag
    # R gives NaN for a negative base with a fractional power: log of x itself does the same.
    return checked_lib.ggml_exp(ctx, checked_lib.ggml_scale(ctx, checked_lib.ggml_log(ctx, x), p))


def clamp(ctx, x, lo, hi):
    """ggml's clamp turns NaN into hi; adding 0 * tanh(x) (0 for every number, infinities
    included, NaN for NaN) keeps NaN, as PyTorch does."""
    return checked_lib.ggml_add(ctx, checked_lib.ggml_clamp(ctx, x, lo, hi), checked_lib.ggml_scale(ctx, checked_lib.ggml_tanh(ctx, x), 0.0))


def inside(ctx, x, lo, hi):
    """1 where lo < x < hi (strictly), else 0: ggmlR's clamp gradient mask."""
    m = None
    if lo != float("-inf"):
        m = checked_lib.ggml_step(ctx, checked_lib.ggml_scale_bias(ctx, x, 1.0, -lo))
    if hi != float("inf"):
        up = checked_lib.ggml_step(ctx, checked_lib.ggml_scale_bias(ctx, x, -1.0, hi))
        m = up if m is None else checked_lib.ggml_mul(ctx, m, up)
    return m if m is not None else checked_lib.ggml_scale_bias(ctx, x, 0.0, 1.0)


def softmax(ctx, x):
    return checked_lib.ggml_soft_max(ctx, x)  # along ne0: per R column


def attention(ctx, q, k, v, mask=None, heads=1, scale=1.0, causal=False):
    """Multi-head attention by ggml's flash_attn_ext (forward only): q [d, T_q, B], k and v
    [d, T_k, B] are the projections; heads are views of them (no copies), the scores are never
    stored, and the result comes back as [d, T_q, B] directly. `mask` is additive, [T_k, 1, 1, B]
    or [T_k, T_q, 1, B]; `causal` hides later keys. ggml wants the mask in f16, [T_k, T_q, ...]."""
    d, tq, tk = int(q.ne[0]), int(q.ne[1]), int(k.ne[1])
    hd = d // heads

    def split(x):  # [d, T, B] -> [hd, T, heads, B], a view
        x4 = checked_lib.ggml_reshape_4d(ctx, x, hd, heads, x.ne[1], x.ne[2] * x.ne[3])
        return checked_lib.ggml_permute(ctx, x4, 0, 2, 1, 3)
    full = None
    if causal or mask is not None:
        batch = int(mask.ne[3]) if mask is not None else 1
        full = checked_lib.ggml_scale_bias(ctx, checked_lib.ggml_reshape_4d(ctx, checked_lib.ggml_arange(ctx, 0.0, float(tk * tq * batch), 1.0),
                                                        tk, tq, 1, batch), 0.0, 0.0)  # zeros, made in the graph
        if causal:
            full = checked_lib.ggml_diag_mask_inf(ctx, full, 0)
        if mask is not None:
            full = checked_lib.ggml_add(ctx, full, mask)
        full = checked_lib.ggml_cast(ctx, full, checked_lib.GGML_TYPE_F16)
    out = checked_lib.ggml_flash_attn_ext(ctx, split(q), split(k), split(v), full if full is not None else ffi.NULL,
                                scale, 0.0, 0.0)  # [hd, heads, T_q, B]
    return checked_lib.ggml_reshape_3d(ctx, out, d, tq, q.ne[2])


def softmax_back(ctx, g, y, scale=1.0):
    """scale * y * (g - colSums(g * y)): softmax's input gradient from its output y, one kernel."""
    return checked_lib.ggml_soft_max_ext_back(ctx, g, y, scale, 0.0)


def softmax_ext(ctx, x, mask=None, scale=1.0, causal=False):
    """softmax(scale * x + mask) per column; `causal` masks entries whose row (key) index exceeds
    the column (query) index, in one ggml kernel with the scaling. The additive mask broadcasts
    over columns and the batch axes: ggml's kernel takes it [nrow, ncol] per batch."""
    if causal:
        x = checked_lib.ggml_diag_mask_inf(ctx, x, 0)
    if mask is not None and mask.ne[1] < x.ne[1]:
        mask = checked_lib.ggml_repeat_4d(ctx, mask, x.ne[0], x.ne[1], mask.ne[2], mask.ne[3])
    return checked_lib.ggml_soft_max_ext(ctx, x, ffi.NULL if mask is None else mask, scale, 0.0)

def layer_norm(ctx, x, eps):
    """Each column to zero mean and unit (biased) variance, (x - mean) / sqrt(var + eps): ggml_norm."""
    return checked_lib.ggml_norm(ctx, x, eps)


def layer_norm_back(ctx, g, x, eps):
    """layer_norm's input gradient, r (g - mean(g) - y mean(g y)) per column, as
    rms_norm_back(center(g), center(x)): centering both leaves rms_norm's gradient equal to layer
    norm's. The centering is one product with I - 1/d (made in the graph; ggml's sum_rows runs on
    one thread, and broadcasting its result costs a pass more).
    Under cpu_kernels(), one fused kernel (the product was a large share of a transformer step)."""
    if (k := _kernels(g, x)) is not None:
        return k.layer_norm_back(ctx, g, x, eps)
    d = int(x.ne[0])
    center = checked_lib.ggml_scale_bias(ctx, checked_lib.ggml_diag(ctx, checked_lib.ggml_reshape_1d(ctx, _ones(ctx, d), d)), 1.0, -1.0 / d)

    def centered(v):
        if not checked_lib.ggml_is_contiguous(v):
            v = checked_lib.ggml_cont(ctx, v)
        v2 = checked_lib.ggml_reshape_2d(ctx, v, d, checked_lib.ggml_nelements(v) // d)
        return checked_lib.ggml_reshape_4d(ctx, checked_lib.ggml_mul_mat(ctx, center, v2), d, v.ne[1], v.ne[2], v.ne[3])
    return checked_lib.ggml_rms_norm_back(ctx, centered(g), centered(x), eps)


def rms_norm(ctx, x, eps):
    """Each column divided by its root mean square, x / sqrt(mean(x^2) + eps): ggml_rms_norm."""
    return checked_lib.ggml_rms_norm(ctx, x, eps)


def rms_norm_back(ctx, g, x, eps):
    """rms_norm's input gradient, r (g - y mean(g y)) per column, as one ggml kernel (ggml takes
    the output gradient first and the forward input second)."""
    if not checked_lib.ggml_is_contiguous(g):
        g = checked_lib.ggml_cont(ctx, g)
    return checked_lib.ggml_rms_norm_back(ctx, g, x, eps)


def _positions(ctx, x, pos):
    """Rotary positions as ggml's rope takes them: i32, one per ne2 row. Given (an i32 input), or
    0 .. ne2 - 1 made in the graph (no host constant, so a compiled step needs no input for it)."""
    if pos is not None:
        return checked_lib.ggml_reshape_1d(ctx, pos, checked_lib.ggml_nelements(pos))
    return checked_lib.ggml_cast(ctx, checked_lib.ggml_arange(ctx, 0.0, float(x.ne[2]), 1.0), checked_lib.GGML_TYPE_I32)


def rope(ctx, x, pos=None, n_dims=0, mode=0, n_ctx_orig=0, freq_base=10000.0, freq_scale=1.0, ext_factor=0.0,
         attn_factor=1.0, beta_fast=32.0, beta_slow=1.0):
    """Rotary position embedding of x [head_dim, n_head, T, B] at positions pos [T] (or 0 .. T - 1):
    ggml_rope_ext, which rotates the first n_dims entries of each head by angles pos * base^(-2i/n_dims),
    pairs (2i, 2i + 1) in mode 0 (llama.cpp's "normal") and (i, i + n_dims/2) in mode 2 (NeoX)."""
    x = x if checked_lib.ggml_is_contiguous(x) else checked_lib.ggml_cont(ctx, x)
    return checked_lib.ggml_rope_ext(ctx, x, _positions(ctx, x, pos), ffi.NULL, n_dims, mode, n_ctx_orig, freq_base,
                           freq_scale, ext_factor, attn_factor, beta_fast, beta_slow)


def rope_back(ctx, g, pos=None, n_dims=0, mode=0, n_ctx_orig=0, freq_base=10000.0, freq_scale=1.0, ext_factor=0.0,
              attn_factor=1.0, beta_fast=32.0, beta_slow=1.0):
    """rope's adjoint (each rotation by the opposite angle): ggml_rope_ext_back."""
    g = g if checked_lib.ggml_is_contiguous(g) else checked_lib.ggml_cont(ctx, g)
    return checked_lib.ggml_rope_ext_back(ctx, g, _positions(ctx, g, pos), ffi.NULL, n_dims, mode, n_ctx_orig, freq_base,
                                freq_scale, ext_factor, attn_factor, beta_fast, beta_slow)


def gelu_back(ctx, g, x, y):
    """g * gelu'(x) = g * (Phi(x) + x phi(x)), from x and y = gelu(x), as one graph: Phi(x) is
    y / x (cheap, where erff again would cost a slow pass of its own), with x = 0 moved to 1e-30
    and y to 0.5e-30 there.
    Under cpu_kernels(), one fused kernel computing Phi itself."""
    if (k := _kernels(g, x)) is not None:
        return k.gelu_back(ctx, g, x)
    zero = checked_lib.ggml_scale_bias(ctx, checked_lib.ggml_sgn(ctx, checked_lib.ggml_abs(ctx, x)), -1e-30, 1e-30)  # 1e-30 where x == 0
    cdf = checked_lib.ggml_div(ctx, checked_lib.ggml_add(ctx, y, checked_lib.ggml_scale(ctx, zero, 0.5)), checked_lib.ggml_add(ctx, x, zero))
    return checked_lib.ggml_mul(ctx, g, checked_lib.ggml_add(ctx, cdf, checked_lib.ggml_mul(ctx, x, _normal_pdf(ctx, x))))


def _normal_pdf(ctx, x):
    return checked_lib.ggml_exp(ctx, checked_lib.ggml_scale_bias(ctx, checked_lib.ggml_sqr(ctx, x), -0.5, -0.9189385332046727))  # ln sqrt(2 pi)


def gelu_deriv(ctx, x):
    """gelu'(x) = Phi(x) + x phi(x) as values (what differentiating GELU's backward again needs):
    under cpu_kernels() one kernel, otherwise from ggml ops through erf."""
    if (k := _kernels(x)) is not None:
        return k.gelu_deriv(ctx, x)
    cdf = checked_lib.ggml_scale_bias(ctx, erf(ctx, checked_lib.ggml_scale(ctx, x, 0.7071067811865476)), 0.5, 0.5)
    return checked_lib.ggml_add(ctx, cdf, checked_lib.ggml_mul(ctx, x, _normal_pdf(ctx, x)))


def gelu_deriv2(ctx, x):
    """gelu''(x) = phi(x) (2 - x^2): under cpu_kernels() one kernel, otherwise ggml ops."""
    if (k := _kernels(x)) is not None:
        return k.gelu_deriv2(ctx, x)
    return checked_lib.ggml_mul(ctx, _normal_pdf(ctx, x), checked_lib.ggml_scale_bias(ctx, checked_lib.ggml_sqr(ctx, x), -1.0, 2.0))


def sum_all(ctx, x):
    return checked_lib.ggml_reshape_2d(ctx, checked_lib.ggml_sum(ctx, x), 1, 1)


def col_sums(ctx, x):
    """[nrow, ncol] -> [1, ncol]: under cpu_kernels() one kernel whose threads share the columns
    (ggml's sum_rows runs on one thread), otherwise ggml_sum_rows."""
    if (k := _kernels(x)) is not None:
        return k.sum_rows(ctx, x)
    return checked_lib.ggml_sum_rows(ctx, x)


def row_sums(ctx, x):
    """[nrow, ncol] -> [nrow, 1] (per batch): repeat_back sums the columns without a transposed copy."""
    return sum_to(ctx, x, (x.ne[0], 1, x.ne[2], x.ne[3]))


def sum_to(ctx, x, shape):
    """x summed over the axes where `shape` has 1 (ggml's repeat_back: the adjoint of repeat)."""
    return checked_lib.ggml_repeat_back(ctx, x, checked_lib.ggml_new_tensor(ctx, F32, 4, _ne4(shape)))


def _ne4(shape):
    return ffi.new("int64_t[4]", list(shape) + [1] * (4 - len(shape)))


def transpose(ctx, x):
    return _t(ctx, x)


def permute(ctx, x, perm):
    """Axes reordered as numpy.transpose(x, perm) does (out's axis i is x's axis perm[i]); ggml's
    permute takes the inverse (where each of x's axes goes)."""
    perm = tuple(perm) + tuple(range(len(perm), 4))
    where = [perm.index(i) for i in range(4)]
    return checked_lib.ggml_cont(ctx, checked_lib.ggml_permute(ctx, x, *where))


def reshape(ctx, x, shape):
    if not checked_lib.ggml_is_contiguous(x):
        x = checked_lib.ggml_cont(ctx, x)
    return checked_lib.ggml_reshape(ctx, x, checked_lib.ggml_new_tensor(ctx, F32, 4, _ne4(shape)))


def broadcast(ctx, x, shape):
    return checked_lib.ggml_repeat_4d(ctx, x, *(list(shape) + [1] * (4 - len(shape))))


def unbroadcast(ctx, g, shape):
    """Sum g down to `shape` (the adjoint of broadcast)."""
    shape = tuple(shape) + (1,) * (4 - len(shape))
    if tuple(_ne(g)) == shape:
        return g
    if shape == (1, 1, 1, 1):
        return sum_all(ctx, g)
    if shape[0] == 1 and tuple(_ne(g))[1:] == shape[1:]:
        return col_sums(ctx, g)
    return sum_to(ctx, g, shape)


def concat(ctx, a, b, dim):
    return checked_lib.ggml_concat(ctx, a, b, dim)


def slice_(ctx, x, start, size):
    """The block of `size` at `start` (one entry per axis)."""
    size = _four(size, 1)
    return checked_lib.ggml_cont(ctx, checked_lib.ggml_view_4d(ctx, x, *size, x.nb[1], x.nb[2], x.nb[3], _offset(x, start)))


def acc_into(ctx, a, g, start):
    """a[start:start + g's shape] += g, in a's own memory (ggml_acc in place; a view of a): how a
    slice's gradient is added into a sum that nothing else holds (engine.walk, graph_mode)."""
    return checked_lib.ggml_acc_inplace(ctx, a, g, a.nb[1], a.nb[2], a.nb[3], _offset(a, start))


def _offset(x, start) -> int:
    """The byte offset of element `start` (one index per axis) in x."""
    return sum(int(i) * int(x.nb[k]) for k, i in enumerate(start))


def pad_into(ctx, g, start, shape):
    """The adjoint of slice_: g at `start` in zeros of `shape`, as one padding kernel (no
    full-size zero tensor to add into)."""
    start, shape = _four(start, 0), _four(shape, 1)
    pads = []
    for k in range(4):
        pads += [start[k], shape[k] - start[k] - int(g.ne[k])]
    return checked_lib.ggml_pad_ext(ctx, g, *pads)


def _four(v, fill):
    return list(v) + [fill] * (4 - len(v))


def get_cols(ctx, w, idx):
    """Columns idx (0-based, i32) of w [dim, vocab]: idx [n, 1] or [1, n] -> [dim, n]; idx [T, B] -> [dim, T, B]."""
    n = checked_lib.ggml_nelements(idx)
    out = checked_lib.ggml_get_rows(ctx, w, checked_lib.ggml_reshape_1d(ctx, idx, n))  # ggml batches only a batched w
    if idx.ne[2] == 1 and (idx.ne[0] == 1 or idx.ne[1] == 1):
        return out
    return checked_lib.ggml_reshape_4d(ctx, out, w.ne[0], idx.ne[0], idx.ne[1], idx.ne[2])


def get_cols_back(ctx, g, idx, vocab):
    n = checked_lib.ggml_nelements(idx)
    template = checked_lib.ggml_new_tensor_2d(ctx, F32, g.ne[0], vocab)
    g2 = checked_lib.ggml_reshape_2d(ctx, checked_lib.ggml_cont(ctx, g), g.ne[0], n)
    return checked_lib.ggml_get_rows_back(ctx, g2, checked_lib.ggml_reshape_1d(ctx, idx, n), template)


def one_hot(ctx, idx, shape):
    """A tensor of `shape` [classes, ...] with a 1 in row idx of each column (idx holds one index
    per column, in column order): columns of an identity made in the graph (from arange, so no
    host constant), gathered by the indices."""
    ones = checked_lib.ggml_reshape_1d(ctx, _ones(ctx, shape[0]), shape[0])
    flat = checked_lib.ggml_reshape_1d(ctx, idx, checked_lib.ggml_nelements(idx))  # i32 storage: contiguous
    return checked_lib.ggml_reshape(ctx, checked_lib.ggml_get_rows(ctx, checked_lib.ggml_diag(ctx, ones), flat),
                          checked_lib.ggml_new_tensor(ctx, F32, 4, _ne4(shape)))


# -- losses, with ggmlR's exact definitions -------------------------------------------------------------
def _cols(x) -> int:
    """The number of columns (samples), counting the batch axes."""
    return int(x.ne[1] * x.ne[2] * x.ne[3])


def mse(ctx, p, t):
    n = checked_lib.ggml_nelements(p)
    return checked_lib.ggml_scale(ctx, sum_all(ctx, checked_lib.ggml_sqr(ctx, checked_lib.ggml_sub(ctx, p, t))), 1.0 / n)


def cross_entropy(ctx, p, t):
    """-sum(t * log(clamp(p, 1e-7, 1 - 1e-7))) / ncol."""
    lp = checked_lib.ggml_log(ctx, checked_lib.ggml_clamp(ctx, p, 1e-7, 1 - 1e-7))
    return checked_lib.ggml_scale(ctx, sum_all(ctx, checked_lib.ggml_mul(ctx, t, lp)), -1.0 / _cols(p))


def softmax_ce(ctx, x, t):
    """-sum(t * log(max(softmax(x), 1e-7))) / ncol."""
    lp = checked_lib.ggml_log(ctx, checked_lib.ggml_clamp(ctx, checked_lib.ggml_soft_max(ctx, x), 1e-7, float("inf")))
    return checked_lib.ggml_scale(ctx, sum_all(ctx, checked_lib.ggml_mul(ctx, t, lp)), -1.0 / _cols(x))


def copy(ctx, x):
    return checked_lib.ggml_scale(ctx, x, 1.0)


def fill(ctx, x, value):
    return checked_lib.ggml_fill(ctx, x, value)


def erf(ctx, x):
    """erf(x) from exp (Abramowitz and Stegun 7.1.26, |error| < 1.5e-7): ggml has no erf op."""
    a1, a2, a3, a4, a5, p = 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429, 0.3275911
    ax = checked_lib.ggml_abs(ctx, x)
    t = checked_lib.ggml_div(ctx, checked_lib.ggml_scale_bias(ctx, ax, 0.0, 1.0), checked_lib.ggml_scale_bias(ctx, ax, p, 1.0))
    poly = checked_lib.ggml_scale_bias(ctx, t, a5, a4)
    for a in (a3, a2, a1):
        poly = checked_lib.ggml_scale_bias(ctx, checked_lib.ggml_mul(ctx, poly, t), 1.0, a)
    poly = checked_lib.ggml_mul(ctx, poly, t)
    y = checked_lib.ggml_scale_bias(ctx, checked_lib.ggml_mul(ctx, poly, checked_lib.ggml_exp(ctx, checked_lib.ggml_neg(ctx, checked_lib.ggml_sqr(ctx, x)))), -1.0, 1.0)
    return checked_lib.ggml_mul(ctx, y, checked_lib.ggml_sgn(ctx, x))


def clip_by_global_norm(ctx, gs, max_norm: float):
    """(norm [1, 1], [g * factor for g in gs]): the gradients' global L2 norm, and each gradient
    scaled by max_norm / (norm + 1e-6) where norm > max_norm, else unchanged (ggmlR's
    clip_grad_norm rule), for f32 gradients. One rule for eager steps (clip_grad_norm runs it as
    one cached graph) and compiled ones (ag_compile emits it).

    Every node is a thread barrier, so the gradients are first set one after another into one
    flat buffer: its squared norm is one product, its scaling one multiply, and each result a
    view of it (some 40 nodes for 36 gradients, where a product and a multiply each took 110)."""
    sizes = [int(checked_lib.ggml_nelements(g)) for g in gs]
    total = sum(sizes)
    flat = checked_lib.ggml_new_tensor_1d(ctx, checked_lib.GGML_TYPE_F32, total)
    offset = 0
    for g, n in zip(gs, sizes):
        t = g if checked_lib.ggml_is_contiguous(g) else checked_lib.ggml_cont(ctx, g)
        # in place, chained: each set depends on the previous one, so all precede the norm
        flat = checked_lib.ggml_set_1d_inplace(ctx, flat, checked_lib.ggml_reshape_1d(ctx, t, n), offset * 4)
        offset += n
    column = checked_lib.ggml_reshape_2d(ctx, flat, total, 1)
    norm = checked_lib.ggml_sqrt(ctx, checked_lib.ggml_mul_mat(ctx, column, column))
    ratio = checked_lib.ggml_div(ctx, checked_lib.ggml_scale_bias(ctx, norm, 0.0, max_norm), checked_lib.ggml_scale_bias(ctx, norm, 1.0, 1e-6))
    over = checked_lib.ggml_step(ctx, checked_lib.ggml_scale_bias(ctx, norm, 1.0, -max_norm))  # 1 where norm > max_norm
    # over * ratio + (1 - over): exact for over in {0, 1} (1 + over * (ratio - 1) would cancel)
    factor = checked_lib.ggml_add(ctx, checked_lib.ggml_mul(ctx, over, ratio), checked_lib.ggml_scale_bias(ctx, over, -1.0, 1.0))
    # ggml broadcasts a single element one call per element: multiply rows of r at once
    r = next(r for r in (256, 128, 64, 32, 16, 8, 4, 2, 1) if total % r == 0)
    scaled = checked_lib.ggml_mul(ctx, checked_lib.ggml_reshape_2d(ctx, flat, r, total // r), checked_lib.ggml_repeat_4d(ctx, factor, r, 1, 1, 1))
    out, offset = [], 0
    for g, n in zip(gs, sizes):
        ne = [int(d) for d in g.ne]
        out.append(checked_lib.ggml_view_4d(ctx, scaled, *ne, ne[0] * 4, ne[0] * ne[1] * 4, ne[0] * ne[1] * ne[2] * 4,
                                  offset * 4))
        offset += n
    return norm, out


# -- images: x ne [W, H, C, N]; window sizes, strides, paddings and dilations in that axis order (W, then H) --
def _shape_only(ctx, kw, kh, c):
    """What ggml_im2col takes as its kernel operand: a [KW, KH, C] tensor it reads the shape of only
    (the trained kernel would make im2col depend on the weights)."""
    return checked_lib.ggml_new_tensor_4d(ctx, F32, kw, kh, c, 1)


def im2col(ctx, x, k, s, p, d):
    """The columns of a 2-D convolution: x [W, H, C, N] -> [C*KH*KW, OW, OH, N], one row per output
    cell, ordered as a kernel [KW, KH, C] flattens (ggml_im2col in f32: its f16 columns lose 1e-3)."""
    return checked_lib.ggml_im2col(ctx, _shape_only(ctx, k[0], k[1], x.ne[2]), x, s[0], s[1], p[0], p[1], d[0], d[1],
                         True, F32)


def im2col_back(ctx, g, shape, k, s, p, d):
    """The adjoint of im2col: each column entry added back into the input cell it came from."""
    if not checked_lib.ggml_is_contiguous(g):
        g = checked_lib.ggml_cont(ctx, g)
    # ggml's own backward passes the gradient first and the kernel's shape second (its CPU kernel reads them so)
    return checked_lib.ggml_im2col_back(ctx, g, _shape_only(ctx, k[0], k[1], shape[2]), _ne4(shape), s[0], s[1], p[0], p[1],
                              d[0], d[1], True)


_FLT_MAX = 3.4028234663852886e38


def max_pool2d(ctx, x, k, s):
    """Max over each window (no padding). ggml's pool never picks a NaN (it keeps the larger of
    the running max and the next value) and starts from -FLT_MAX, so two terms are added, each 0
    unless it corrects the window: a NaN, as 0 * tanh(x) averaged over the window (0 for every
    number, infinities included; NaN for NaN), as clamp does; and -inf where every value is -inf,
    as log(0) (the window's share of -inf values, 1 exactly when all are)."""
    x = x if checked_lib.ggml_is_contiguous(x) else checked_lib.ggml_cont(ctx, x)

    def avg(t):
        return checked_lib.ggml_pool_2d(ctx, t, checked_lib.GGML_OP_POOL_AVG, k[0], k[1], s[0], s[1], 0.0, 0.0)
    m = checked_lib.ggml_pool_2d(ctx, x, checked_lib.GGML_OP_POOL_MAX, k[0], k[1], s[0], s[1], 0.0, 0.0)
    nan = avg(checked_lib.ggml_scale(ctx, checked_lib.ggml_tanh(ctx, x), 0.0))
    share = avg(checked_lib.ggml_step(ctx, checked_lib.ggml_scale_bias(ctx, x, -1.0, -_FLT_MAX)))  # of -inf (-x > FLT_MAX)
    every = checked_lib.ggml_step(ctx, checked_lib.ggml_scale_bias(ctx, share, 1.0, 0.5 / (k[0] * k[1]) - 1.0))
    return checked_lib.ggml_add(ctx, checked_lib.ggml_add(ctx, m, nan), checked_lib.ggml_log(ctx, checked_lib.ggml_scale_bias(ctx, every, -1.0, 1.0)))


def max_pool2d_back(ctx, g, x, k, s):
    """max_pool2d's input gradient: each window's g added at the place of its maximum (ggml's pool_2d_back)."""
    g = g if checked_lib.ggml_is_contiguous(g) else checked_lib.ggml_cont(ctx, g)
    x = x if checked_lib.ggml_is_contiguous(x) else checked_lib.ggml_cont(ctx, x)
    return checked_lib.ggml_pool_2d_back(ctx, g, x, checked_lib.GGML_OP_POOL_MAX, k[0], k[1], s[0], s[1], 0.0, 0.0)
