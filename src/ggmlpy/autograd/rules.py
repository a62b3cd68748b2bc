"""The rule table: for each primitive, its forward builder, its VJP and its JVP, side by side.

A rule sees the call through `c` (call.Call): `c.x(i)` is input i, `c.out` the
output, `c.params` the primitive's parameters, `c.in_shapes` the inputs' shapes.
On the tape only the snapshots a rule declares in `saves` (input indices) and
`saves_out` are kept, so `c.x(i)` works exactly for those. A rule applies its own
primitives through the call, `c.apply(op, ...)` and the helpers `c.mul`, `c.unbroadcast`, ...:
eagerly or as graph nodes, as the caller that handed in the call decides.

VJPs take the output gradient `g` and return one gradient (or None) per input.
JVPs take one tangent (or None) per input and return the output's tangent.
Both are written with primitives, so they are differentiable themselves:
hvp() is the JVP of a backward pass, and nested JVPs give higher derivatives.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import erf, pi, sqrt

from ..errors import GGMLError
from . import forward_ad
from . import prims


@dataclass(frozen=True)
class Rule:
    fwd: object
    vjp: object = None
    jvp: object = None
    saves: tuple = ()
    saves_out: bool = False
    index_inputs: tuple = ()  # inputs that hold i32 indices; every other input must be floating point
    index_bound: object = None  # (params, input shapes) -> n: the indices must lie in [0, n)
    stored_inputs: tuple = ()  # inputs read in their stored type (f16, bf16) rather than cast to f32 first


# -- VJPs and JVPs ---------------------------------------------------------------------------------------
def _matmul_vjp(g, c):
    ta, tb = c.params["ta"], c.params["tb"]
    a, b = c.x(0), c.x(1)
    if len(c.in_shapes[0]) == 2 and len(c.in_shapes[1]) > 2 and not tb:
        # a 2-D weight times a batch: its gradient contracts g and b over columns and batch at
        # once, as one 2-D product of the flattened tensors (no per-batch products summed after)
        g2, b2 = _flat(c, g), _flat(c, b)
        ga = c.apply("matmul", b2, g2, ta=False, tb=True) if ta else c.apply("matmul", g2, b2, ta=False, tb=True)
    else:
        ga = c.apply("matmul", b, g, ta=tb, tb=True) if ta else c.apply("matmul", g, b, ta=False, tb=not tb)
    gb = c.apply("matmul", g, a, ta=True, tb=ta) if tb else c.apply("matmul", a, g, ta=not ta, tb=False)
    return c.unbroadcast(ga, c.in_shapes[0]), c.unbroadcast(gb, c.in_shapes[1])


def _flat(c, x):
    """[k, n, B...] as the matrix [k, n * B...]."""
    return c.apply("reshape", x, shape=(x.shape[0], _n(x.shape) // x.shape[0]))


def _matmul_jvp(t, c):
    ta, tb = c.params["ta"], c.params["tb"]
    return c.tangent_sum(None if t[0] is None else c.apply("matmul", t[0], c.x(1), ta=ta, tb=tb),
                         None if t[1] is None else c.apply("matmul", c.x(0), t[1], ta=ta, tb=tb))


def _div_vjp(g, c):
    b = c.x(1)
    ga = c.apply("div", g, b)
    gb = c.neg(c.apply("div", c.mul(g, c.out), b))
    return c.unbroadcast(ga, c.in_shapes[0]), c.unbroadcast(gb, c.in_shapes[1])


def _div_jvp(t, c):
    b = c.x(1)
    ta = None if t[0] is None else c.apply("div", c.bcast(t[0], c.out.shape), b)
    tb = None if t[1] is None else c.neg(c.apply("div", c.mul(c.out, t[1]), b))
    return c.tangent_sum(ta, tb)


def _softmax_vjp(g, c):
    return (c.apply("softmax_back", g, c.out, scale=1.0),)


def _softmax_jvp(t, c):
    return c.apply("softmax_back", t[0], c.out, scale=1.0)


def _softmax_ext_vjp(g, c):
    # y = softmax(s x + m): x's gradient is s times the mask's; a causally masked entry has
    # y = 0, so it gets none.
    gx = c.apply("softmax_back", g, c.out, scale=c.params["scale"])
    if len(c.in_shapes) == 1:
        return (gx,)
    return gx, c.unbroadcast(c.apply("softmax_back", g, c.out, scale=1.0), c.in_shapes[1])


def _softmax_ext_jvp(t, c):
    tin = c.tangent_sum(None if t[0] is None else c.scale(t[0], c.params["scale"]),
                        c.bcast(t[1], c.out.shape) if len(t) > 1 else None)
    return None if tin is None else _softmax_jvp((tin,), c)


def _softmax_back_vjp(G, c):
    # out = s y (g - colSums(g y)) is linear and self-adjoint in g; in y:
    # d<G, out>/dy = s (G (g - colSums(g y)) - g colSums(G y))
    g, y, s = c.x(0), c.x(1), c.params["scale"]
    gy = c.scale(c.apply("sub", c.mul(G, c.apply("sub", g, c.apply("col_sums", c.mul(g, y)))),
                      c.mul(g, c.apply("col_sums", c.mul(G, y)))), s)
    return c.apply("softmax_back", G, y, scale=s), gy


def _softmax_back_jvp(t, c):
    g, y, s = c.x(0), c.x(1), c.params["scale"]
    tg = None if t[0] is None else c.apply("softmax_back", t[0], y, scale=s)
    ty = None if t[1] is None else c.scale(c.apply("sub", c.mul(t[1], c.apply("sub", g, c.apply("col_sums", c.mul(g, y)))),
                                               c.mul(y, c.apply("col_sums", c.mul(g, t[1])))), s)
    return c.tangent_sum(tg, ty)


def _col_mean(c, x):
    return c.scale(c.apply("col_sums", x), 1.0 / x.shape[0])


def _layer_norm_vjp(g, c):
    # y = (x - mean) * r, r = (var + eps)^-1/2 per column: dx = r * (g - mean(g) - y * mean(g * y))
    x, y = c.x(0), c.out
    if not forward_ad.LEVELS:  # nothing differentiates this again: the fused kernels (not differentiable)
        return (c.apply("layer_norm_back", g, x, eps=c.params["eps"]),)
    xc = c.apply("sub", x, _col_mean(c, x))
    r = c.apply("pow", c.apply("add_scalar", _col_mean(c, c.apply("sqr", xc)), c=c.params["eps"]), p=-0.5)
    inner = c.apply("sub", c.apply("sub", g, _col_mean(c, g)), c.mul(y, _col_mean(c, c.mul(g, y))))
    return (c.mul(inner, r),)


def _layer_norm_jvp(t, c):
    return None if t[0] is None else _layer_norm_vjp(t[0], c)[0]  # the Jacobian is symmetric


def _rms_norm_vjp(g, c):
    # y = x * r, r = (mean(x^2) + eps)^-1/2 per column: dx = r * (g - y * mean(g * y))
    x, y = c.x(0), c.out
    if not forward_ad.LEVELS:  # nothing differentiates this again: ggml's kernel (not differentiable)
        return (c.apply("rms_norm_back", g, x, eps=c.params["eps"]),)
    r = c.apply("pow", c.apply("add_scalar", _col_mean(c, c.apply("sqr", x)), c=c.params["eps"]), p=-0.5)
    return (c.mul(c.apply("sub", g, c.mul(y, _col_mean(c, c.mul(g, y)))), r),)


def _rms_norm_jvp(t, c):
    return None if t[0] is None else _rms_norm_vjp(t[0], c)[0]  # the Jacobian is symmetric


def _rope_rule(op, adjoint):
    """A rotation by position-dependent angles (rope) or by their opposites (rope_back): linear in
    x, its adjoint the other; the positions (an optional i32 input) get no gradient."""
    def pos(c):
        return (c.x(1),) if len(c.in_shapes) > 1 else ()

    def vjp(g, c):
        return (c.apply(adjoint, g, *pos(c), **c.params),) + (None,) * (len(c.in_shapes) - 1)

    def jvp(t, c):
        return None if t[0] is None else c.apply(op, t[0], *pos(c), **c.params)
    return Rule(getattr(prims, op), vjp, jvp, saves=(1,), index_inputs=(1,))


def _pow_vjp(g, c):
    p = c.params["p"]
    return (c.mul(g, c.scale(c.apply("pow", c.x(0), p=p - 1), p)),)


def _pow_jvp(t, c):
    p = c.params["p"]
    return c.mul(t[0], c.scale(c.apply("pow", c.x(0), p=p - 1), p))


def _gelu_vjp(g, c):
    if forward_ad.LEVELS:  # a forward level may differentiate this again: gelu' as a primitive
        return (c.mul(g, c.apply("gelu_deriv", c.x(0))),)
    return (c.apply("gelu_back", g, c.x(0), c.out),)  # one fused graph, not differentiable


def _gelu_third_derivative(c):
    # phi(x) (x^3 - 4x), from primitives: any further order differentiates those
    x = c.x(0)
    phi = c.scale(c.apply("exp", c.scale(c.apply("sqr", x), -0.5)), 1 / sqrt(2 * pi))
    return c.mul(phi, c.mul(x, c.apply("add_scalar", c.apply("sqr", x), c=-4.0)))


_GELU_TANH_K, _GELU_TANH_A = sqrt(2 / pi), 0.044715


def _gelu_tanh_deriv(c):
    """d/dx of GELU's tanh form 0.5 x (1 + tanh(u)), u = k (x + a x^3):
    0.5 (1 + tanh u) + 0.5 k x (1 - tanh^2 u) (1 + 3 a x^2), from primitives (so it differentiates
    again). The forward (ggml_gelu) rounds through an f16 table on the CPU; this is the
    derivative of the function that table samples."""
    x = c.x(0)
    x2 = c.apply("sqr", x)
    t = c.apply("tanh", c.scale(c.mul(x, c.apply("add_scalar", c.scale(x2, _GELU_TANH_A), c=1.0)), _GELU_TANH_K))
    sech2 = c.apply("add_scalar", c.neg(c.apply("sqr", t)), c=1.0)
    inner = c.scale(c.mul(c.mul(x, sech2), c.apply("add_scalar", c.scale(x2, 3 * _GELU_TANH_A), c=1.0)),
                    0.5 * _GELU_TANH_K)
    return c.add(c.scale(c.apply("add_scalar", t, c=1.0), 0.5), inner)


def _silu_deriv(c, x):
    s = c.apply("sigmoid", x)
    return c.mul(s, c.apply("add_scalar", c.mul(x, c.apply("add_scalar", c.neg(s), c=1.0)), c=1.0))


def _elementwise(fwd, deriv, saves=(0,), saves_out=False):
    """A rule for y = f(x) with f'(x) given by `deriv(c)`: VJP g*f', JVP t*f'."""
    return Rule(fwd, vjp=lambda g, c: (c.mul(g, deriv(c)),), jvp=lambda t, c: c.mul(t[0], deriv(c)),
                saves=saves, saves_out=saves_out)


def _const(fwd, n_in=1):
    """A piecewise-constant primitive: its derivative is zero almost everywhere."""
    return Rule(fwd, vjp=lambda g, c: (None,) * n_in, jvp=lambda t, c: None)


def _unary(name):
    return lambda ctx, x: prims.unary(ctx, x, name)


def _linear(fwd, vjp1, jvp1=None, saves=()):
    """A linear map of one input: its JVP is the map itself applied to the tangent."""
    return Rule(fwd, vjp=lambda g, c: (vjp1(g, c),),
                jvp=(lambda t, c: None if t[0] is None else jvp1(t[0], c)) if jvp1 else None, saves=saves)


def _add_relu_vjp(g, c):
    gm = c.apply("where_positive", g, c.out)  # relu's mask; the bias then sums it over the broadcast
    return gm, c.unbroadcast(gm, c.in_shapes[1])


def _add_relu_jvp(t, c):
    t_in = c.tangent_sum(t[0], c.bcast(t[1], c.in_shapes[0]))
    return None if t_in is None else c.apply("where_positive", t_in, c.out)


def _pad4(shape):
    return tuple(shape) + (1,) * (4 - len(shape))


def _window_sum(c, t, k, s, shape):
    """The sum of t [W, H, C, N] over each pooling window, as `shape` [OW, OH, C, N]: t's channels
    as images of one channel, their columns (im2col), each column summed."""
    w, h, ch, n = _pad4(t.shape)
    cols = c.apply("im2col", c.apply("reshape", t, shape=(w, h, 1, ch * n)), k=k, s=s, p=(0, 0), d=(1, 1))
    return c.apply("reshape", c.apply("col_sums", cols), shape=tuple(shape))


def _pool_select(c, t, x, pooled, k, s):
    """t at the place of each window's maximum of x (the windows of `pooled`, max_pool2d(x)):
    max pooling's JVP, and the adjoint of its gradient. The places are max_pool2d_back's (one per
    window, ties as its backward breaks them), so forward and reverse mode agree; with windows
    that overlap a place may be one window's maximum and not another's, which this mask cannot
    tell apart."""
    if s[0] < k[0] or s[1] < k[1]:
        raise GGMLError(f"ag_max_pool2d: forward-mode derivatives need windows that do not overlap "
                        f"(stride {list(s)} at least kernel {list(k)}); reverse mode has no such limit")
    mask = c.apply("max_pool2d_back", c.apply("fill", pooled, value=1.0), x, k=k, s=s)
    return _window_sum(c, c.mul(t, mask), k, s, pooled.shape)


def _window(params):
    return {key: params[key] for key in ("k", "s", "p", "d")}


DERIVATIVE_RULES = {
    # 2-D convolution is im2col (below) and a product (ag_conv2d): the product's rule gives the
    # kernel's gradient, im2col's adjoint the input's.
    "im2col": _linear(prims.im2col, lambda g, c: c.apply("im2col_back", g, shape=_pad4(c.in_shapes[0]), **c.params),
                      lambda t, c: c.apply("im2col", t, **c.params)),
    "im2col_back": _linear(prims.im2col_back, lambda g, c: c.apply("im2col", g, **_window(c.params)),
                           lambda t, c: c.apply("im2col_back", t, **c.params)),
    "max_pool2d": Rule(prims.max_pool2d, vjp=lambda g, c: (c.apply("max_pool2d_back", g, c.x(0), **c.params),),
                       jvp=lambda t, c: _pool_select(c, t[0], c.x(0), c.out, **c.params), saves=(0,)),
    # linear in g; x only places it (no gradient: max pooling is piecewise linear)
    "max_pool2d_back": Rule(prims.max_pool2d_back,
                            vjp=lambda g, c: (_pool_select(c, g, c.x(1), c.x(0), **c.params), None),
                            jvp=lambda t, c: None if t[0] is None else c.apply("max_pool2d_back", t[0], c.x(1),
                                                                           **c.params),
                            saves=(0, 1)),

    "matmul": Rule(prims.matmul, _matmul_vjp, _matmul_jvp, saves=(0, 1)),
    "add": Rule(prims.add, lambda g, c: (g, c.unbroadcast(g, c.in_shapes[1])),
                lambda t, c: c.tangent_sum(t[0], c.bcast(t[1], c.in_shapes[0]))),
    "sub": Rule(prims.sub, lambda g, c: (g, c.unbroadcast(c.neg(g), c.in_shapes[1])),
                lambda t, c: c.tangent_sum(t[0], None if t[1] is None else c.neg(c.bcast(t[1], c.in_shapes[0])))),
    "mul": Rule(prims.mul, lambda g, c: (c.unbroadcast(c.mul(g, c.x(1)), c.in_shapes[0]), c.unbroadcast(c.mul(g, c.x(0)), c.in_shapes[1])),
                lambda t, c: c.tangent_sum(None if t[0] is None else c.mul(t[0], c.x(1)),
                                           None if t[1] is None else c.mul(c.x(0), t[1])), saves=(0, 1)),
    "div": Rule(prims.div, _div_vjp, _div_jvp, saves=(1,), saves_out=True),
    "scale": _linear(prims.scale, lambda g, c: c.scale(g, c.params["s"]), lambda t, c: c.scale(t, c.params["s"])),
    "add_scalar": _linear(prims.add_scalar, lambda g, c: g, lambda t, c: t),
    "neg": _linear(prims.neg, lambda g, c: c.neg(g), lambda t, c: c.neg(t)),
    "copy": _linear(prims.copy, lambda g, c: g, lambda t, c: t),
    # relu keeps its output, not its input (x > 0 iff relu(x) > 0): the next layer keeps it
    # anyway, so the tape holds one tensor where it would hold two.
    "relu": Rule(prims.relu, vjp=lambda g, c: (c.apply("where_positive", g, c.out),),
                 jvp=lambda t, c: c.apply("where_positive", t[0], c.out), saves_out=True),
    "add_relu": Rule(prims.add_relu, _add_relu_vjp, _add_relu_jvp, saves_out=True),
    # linear in g; y only selects, so it gets no gradient
    "where_positive": Rule(prims.where_positive, vjp=lambda g, c: (c.apply("where_positive", g, c.x(1)), None),
                           jvp=lambda t, c: None if t[0] is None else c.apply("where_positive", t[0], c.x(1)),
                           saves=(1,)),
    "sigmoid": _elementwise(_unary("sigmoid"), lambda c: c.mul(c.out, c.apply("add_scalar", c.neg(c.out), c=1.0)),
                            saves=(), saves_out=True),
    "tanh": _elementwise(_unary("tanh"), lambda c: c.apply("add_scalar", c.neg(c.apply("sqr", c.out)), c=1.0),
                         saves=(), saves_out=True),
    "exp": _elementwise(_unary("exp"), lambda c: c.out, saves=(), saves_out=True),
    "log": _elementwise(_unary("log"), lambda c: c.apply("pow", c.x(0), p=-1.0)),
    "sqrt": _elementwise(_unary("sqrt"), lambda c: c.scale(c.apply("pow", c.out, p=-1.0), 0.5), saves=(), saves_out=True),
    "sqr": _elementwise(_unary("sqr"), lambda c: c.scale(c.x(0), 2.0)),
    "abs": _elementwise(_unary("abs"), lambda c: c.apply("sgn", c.x(0))),
    "gelu": Rule(_unary("gelu_erf"), _gelu_vjp, lambda t, c: c.mul(t[0], c.apply("gelu_deriv", c.x(0))),
                 saves=(0,), saves_out=True),
    # GELU's first and second derivatives as values (one kernel each on the CPU), for hvp
    "gelu_deriv": _elementwise(prims.gelu_deriv, lambda c: c.apply("gelu_deriv2", c.x(0))),
    "gelu_deriv2": _elementwise(prims.gelu_deriv2, _gelu_third_derivative),
    "gelu_back": Rule(prims.gelu_back),  # used only where nothing differentiates it again (_gelu_vjp)
    # ggml_gelu, the tanh form, as llama.cpp's gpt2 feed-forward computes it
    "gelu_tanh": _elementwise(_unary("gelu"), _gelu_tanh_deriv),
    "silu": _elementwise(_unary("silu"), lambda c: _silu_deriv(c, c.x(0))),
    "erf": _elementwise(lambda ctx, x: prims.erf(ctx, x),
                        lambda c: c.scale(c.apply("exp", c.neg(c.apply("sqr", c.x(0)))), 2 / sqrt(pi))),
    "pow": Rule(prims.pow_, _pow_vjp, _pow_jvp, saves=(0,)),
    "clamp": _elementwise(prims.clamp, lambda c: c.apply("inside", c.x(0), lo=c.params["lo"], hi=c.params["hi"])),
    "step": _const(_unary("step")),
    "sgn": _const(_unary("sgn")),
    "inside": _const(prims.inside),
    "fill": _const(prims.fill),
    "softmax": Rule(prims.softmax, _softmax_vjp, _softmax_jvp, saves_out=True),
    "layer_norm": Rule(prims.layer_norm, _layer_norm_vjp, _layer_norm_jvp, saves=(0,), saves_out=True),
    # used only where nothing differentiates it again (see _layer_norm_vjp): no rules of its own
    "layer_norm_back": Rule(prims.layer_norm_back),
    "rms_norm": Rule(prims.rms_norm, _rms_norm_vjp, _rms_norm_jvp, saves=(0,), saves_out=True),
    "rms_norm_back": Rule(prims.rms_norm_back),  # likewise (see _rms_norm_vjp)
    "rope": _rope_rule("rope", "rope_back"),
    "rope_back": _rope_rule("rope_back", "rope"),
    # flash attention: used only where nothing records or differentiates it (inference); training
    # goes through the batched products and softmax, whose rules are above
    "attention": Rule(prims.attention),
    "softmax_back": Rule(prims.softmax_back, _softmax_back_vjp, _softmax_back_jvp, saves=(0, 1)),
    "softmax_ext": Rule(prims.softmax_ext, _softmax_ext_vjp, _softmax_ext_jvp, saves_out=True),
    "sum_all": _linear(prims.sum_all, lambda g, c: c.bcast(g, c.in_shapes[0]), lambda t, c: c.apply("sum_all", t)),
    "col_sums": _linear(prims.col_sums, lambda g, c: c.bcast(g, c.in_shapes[0]), lambda t, c: c.apply("col_sums", t)),
    "row_sums": _linear(prims.row_sums, lambda g, c: c.bcast(g, c.in_shapes[0]), lambda t, c: c.apply("row_sums", t)),
    "broadcast": _linear(prims.broadcast, lambda g, c: c.unbroadcast(g, c.in_shapes[0]),
                         lambda t, c: c.apply("broadcast", t, **c.params)),
    "unbroadcast": _linear(prims.unbroadcast, lambda g, c: c.bcast(g, c.in_shapes[0]),
                           lambda t, c: c.apply("unbroadcast", t, **c.params)),
    "transpose": _linear(prims.transpose, lambda g, c: c.apply("transpose", g), lambda t, c: c.apply("transpose", t)),
    "permute": _linear(prims.permute, lambda g, c: c.apply("permute", g, perm=_inverse(c.params["perm"])),
                       lambda t, c: c.apply("permute", t, **c.params)),
    "reshape": _linear(prims.reshape, lambda g, c: c.apply("reshape", g, shape=c.in_shapes[0]),
                       lambda t, c: c.apply("reshape", t, **c.params)),
    "slice": _linear(prims.slice_, lambda g, c: c.apply("pad_into", g, start=c.params["start"], shape=c.in_shapes[0]),
                     lambda t, c: c.apply("slice", t, **c.params)),
    "pad_into": _linear(prims.pad_into, lambda g, c: c.apply("slice", g, start=c.params["start"], size=c.in_shapes[0]),
                        lambda t, c: c.apply("pad_into", t, **c.params)),
    "concat": Rule(prims.concat, lambda g, c: _concat_vjp(g, c), lambda t, c: _concat_jvp(t, c)),
    "get_cols": Rule(prims.get_cols, lambda g, c: (c.apply("get_cols_back", g, c.x(1), vocab=c.in_shapes[0][1]), None),
                     lambda t, c: None if t[0] is None else c.apply("get_cols", t[0], c.x(1)), saves=(1,),
                     index_inputs=(1,), index_bound=lambda p, shapes: shapes[0][1]),
    "get_cols_back": Rule(prims.get_cols_back, lambda g, c: (c.apply("get_cols", g, c.x(1)), None),
                          lambda t, c: None if t[0] is None else c.apply("get_cols_back", t[0], c.x(1), **c.params),
                          saves=(1,), index_inputs=(1,), index_bound=lambda p, shapes: p["vocab"]),
    "one_hot": Rule(prims.one_hot, lambda g, c: (None,), lambda t, c: None, index_inputs=(0,),
                    index_bound=lambda p, shapes: p["shape"][0]),
    # Losses, with ggmlR's definitions and gradients (see prims.py): the target gets no gradient.
    "mse": Rule(prims.mse, lambda g, c: (c.mul(c.scale(c.apply("sub", c.x(0), c.x(1)), 2.0 / _n(c.in_shapes[0])), g), None),
                lambda t, c: None if t[0] is None else c.apply("sum_all", c.mul(
                    c.scale(c.apply("sub", c.x(0), c.x(1)), 2.0 / _n(c.in_shapes[0])), t[0])), saves=(0, 1)),
    "cross_entropy": Rule(prims.cross_entropy, lambda g, c: (c.mul(_ce_grad(c), g), None),
                          lambda t, c: None if t[0] is None else c.apply("sum_all", c.mul(_ce_grad(c), t[0])),
                          saves=(0, 1)),
    "softmax_ce": Rule(prims.softmax_ce, lambda g, c: (c.mul(_sce_grad(c), g), None),
                       lambda t, c: None if t[0] is None else c.apply("sum_all", c.mul(_sce_grad(c), t[0])),
                       saves=(0, 1)),
}


def _n(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _cols(shape):
    """Columns (samples), counting the batch axes."""
    return _n(shape) // shape[0]


def _inverse(perm):
    return tuple(sorted(range(len(perm)), key=lambda i: perm[i]))


def _ce_grad(c):
    p, t = c.x(0), c.x(1)
    pc = c.apply("clamp", p, lo=1e-7, hi=1 - 1e-7)
    return c.scale(c.apply("div", t, pc), -1.0 / _cols(c.in_shapes[0]))


def _sce_grad(c):
    return c.scale(c.apply("sub", c.apply("softmax", c.x(0)), c.x(1)), 1.0 / _cols(c.in_shapes[0]))


def _concat_vjp(g, c):
    a, b = (tuple(s) + (1,) * (4 - len(s)) for s in c.in_shapes[:2])
    dim = c.params["dim"]
    start_b = tuple(a[dim] if k == dim else 0 for k in range(4))
    return c.apply("slice", g, start=(0,) * 4, size=a), c.apply("slice", g, start=start_b, size=b)


def _concat_jvp(t, c):
    # an input without a tangent contributes zeros of its shape (forward mode sees every input)
    ta = t[0] if t[0] is not None else c.apply("fill", c.x(0), value=0.0)
    tb = t[1] if t[1] is not None else c.apply("fill", c.x(1), value=0.0)
    return c.apply("concat", ta, tb, dim=c.params["dim"])


_ = erf  # math.erf documents what the "erf" primitive computes
