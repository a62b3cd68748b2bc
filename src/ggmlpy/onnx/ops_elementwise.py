"""ONNX operators, element-wise: one input, two or more inputs, and casts."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .onnx_lib import onnx_lib
from . import float8
from .graph import FLOAT8_TYPES, FLOAT_TYPES, Val, const, np_dtype
from .layout import binary, broadcast_shape, permuted_source, repeat_to, reshape, scalar_f32
from .op_table import BOOL, FLT_MAX, OPS, cscalar, f, op


# -- element-wise: one input ----------------------------------------------------------------------------
def _unary(fn):
    def build(b, node, ins, at):
        x = ins[0]
        return [b.out(fn(b, f(b, x), at), x.shape, x.dtype)]
    return build


def _erf(b, x):
    """erf(x) = sgn(x) (1 - t p(t) exp(-x^2)), t = 1/(1 + 0.3275911 |x|): Abramowitz & Stegun 7.1.26,
    absolute error below 1.5e-7 (ggml has no erf kernel)."""
    c = b.ctx
    ax = onnx_lib.ggml_abs(c, x)
    t = onnx_lib.ggml_div(c, onnx_lib.ggml_repeat(c, scalar_f32(b, 1.0), ax), onnx_lib.ggml_scale_bias(c, ax, 0.3275911, 1.0))
    poly = scalar_f32(b, 1.061405429)
    p = onnx_lib.ggml_repeat(c, poly, t)
    for coef in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        p = onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_mul(c, p, t), 1.0, coef)
    p = onnx_lib.ggml_mul(c, p, t)
    e = onnx_lib.ggml_exp(c, onnx_lib.ggml_neg(c, onnx_lib.ggml_sqr(c, x)))
    y = onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_mul(c, p, e), -1.0, 1.0)
    return onnx_lib.ggml_mul(c, y, onnx_lib.ggml_sgn(c, x))


def _round_even(b, x):
    """Round half to even, as ONNX Round: adding and removing 1.5 * 2**23 lets float32 addition round
    (exact for |x| < 2**22; larger floats are integers already)."""
    c = b.ctx
    magic = 12582912.0
    big = onnx_lib.ggml_scale_bias(c, x, 1.0, magic)
    r = onnx_lib.ggml_scale_bias(c, big, 1.0, -magic)
    # |x| >= 2**22: keep x (already integral, or closer to it than the trick's granularity)
    small = onnx_lib.ggml_step(c, onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_abs(c, x), -1.0, 4194304.0))
    return onnx_lib.ggml_add(c, onnx_lib.ggml_mul(c, small, onnx_lib.ggml_sub(c, r, x)), x)


def _elu_alpha(b, x, alpha):
    c = b.ctx
    if alpha == 1.0:
        return onnx_lib.ggml_elu(c, x)
    r = onnx_lib.ggml_relu(c, x)  # relu(x) + alpha * (elu(x) - relu(x))
    return onnx_lib.ggml_add(c, r, onnx_lib.ggml_scale(c, onnx_lib.ggml_sub(c, onnx_lib.ggml_elu(c, x), r), alpha))


def _recip(b, x):
    return onnx_lib.ggml_div(b.ctx, onnx_lib.ggml_repeat(b.ctx, scalar_f32(b, 1.0), x), x)


def _gelu_tanh(b, x):
    c = b.ctx
    inner = onnx_lib.ggml_mul(c, x, onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_sqr(c, x), 0.044715, 1.0))
    th = onnx_lib.ggml_tanh(c, onnx_lib.ggml_scale(c, inner, float(np.sqrt(2.0 / np.pi))))
    return onnx_lib.ggml_mul(c, onnx_lib.ggml_scale(c, x, 0.5), onnx_lib.ggml_scale_bias(c, th, 1.0, 1.0))


UNARY = {
    "Abs": lambda b, x, at: onnx_lib.ggml_abs(b.ctx, x),
    "Neg": lambda b, x, at: onnx_lib.ggml_neg(b.ctx, x),
    "Exp": lambda b, x, at: onnx_lib.ggml_exp(b.ctx, x),
    "Log": lambda b, x, at: onnx_lib.ggml_log(b.ctx, x),
    "Sqrt": lambda b, x, at: onnx_lib.ggml_sqrt(b.ctx, x),
    "Relu": lambda b, x, at: b.relu(x),
    "Sigmoid": lambda b, x, at: onnx_lib.ggml_sigmoid(b.ctx, x),
    "Tanh": lambda b, x, at: onnx_lib.ggml_tanh(b.ctx, x),
    "Sin": lambda b, x, at: onnx_lib.ggml_sin(b.ctx, x),
    "Cos": lambda b, x, at: onnx_lib.ggml_cos(b.ctx, x),
    "Floor": lambda b, x, at: onnx_lib.ggml_floor(b.ctx, x),
    "Ceil": lambda b, x, at: onnx_lib.ggml_ceil(b.ctx, x),
    "Round": lambda b, x, at: _round_even(b, x),
    "Sign": lambda b, x, at: onnx_lib.ggml_sgn(b.ctx, x),
    "Reciprocal": lambda b, x, at: _recip(b, x),
    "Erf": lambda b, x, at: _erf(b, x),
    "Softplus": lambda b, x, at: onnx_lib.ggml_softplus(b.ctx, x),
    "Softsign": lambda b, x, at: onnx_lib.ggml_div(b.ctx, x, onnx_lib.ggml_scale_bias(b.ctx, onnx_lib.ggml_abs(b.ctx, x), 1.0, 1.0)),
    "Elu": lambda b, x, at: _elu_alpha(b, x, float(at.get("alpha", 1.0))),
    "Selu": lambda b, x, at: onnx_lib.ggml_scale(b.ctx, _elu_alpha(b, x, float(at.get("alpha", 1.67326319217681884765625))),
                                            float(at.get("gamma", 1.05070102214813232421875))),
    "Celu": lambda b, x, at: onnx_lib.ggml_scale(b.ctx, onnx_lib.ggml_elu(b.ctx, onnx_lib.ggml_scale(b.ctx, x, 1.0 / float(at.get("alpha", 1.0)))),
                                            float(at.get("alpha", 1.0))),
    "LeakyRelu": lambda b, x, at: b.keep_nan(onnx_lib.ggml_leaky_relu(b.ctx, x, float(at.get("alpha", 0.01)), False), x),
    "HardSigmoid": lambda b, x, at: b.keep_nan(onnx_lib.ggml_clamp(b.ctx, onnx_lib.ggml_scale_bias(
        b.ctx, x, float(at.get("alpha", 0.2)), float(at.get("beta", 0.5))), 0.0, 1.0), x),
    "HardSwish": lambda b, x, at: onnx_lib.ggml_mul(b.ctx, x, onnx_lib.ggml_clamp(b.ctx, onnx_lib.ggml_scale_bias(b.ctx, x, 1 / 6, 0.5), 0.0, 1.0)),
    "Mish": lambda b, x, at: onnx_lib.ggml_mul(b.ctx, x, onnx_lib.ggml_tanh(b.ctx, onnx_lib.ggml_softplus(b.ctx, x))),
    "Swish": lambda b, x, at: onnx_lib.ggml_mul(b.ctx, x, onnx_lib.ggml_sigmoid(b.ctx, onnx_lib.ggml_scale(b.ctx, x, float(at.get("alpha", 1.0))))),
    "ThresholdedRelu": lambda b, x, at: onnx_lib.ggml_mul(b.ctx, x, onnx_lib.ggml_step(b.ctx, onnx_lib.ggml_scale_bias(
        b.ctx, x, 1.0, -float(at.get("alpha", 1.0))))),
    "Gelu": lambda b, x, at: _gelu_tanh(b, x) if at.get("approximate", b"none") in (b"tanh", "tanh")
    else b.gelu_erf(x),
    "Shrink": lambda b, x, at: _shrink(b, x, float(at.get("lambd", 0.5)), float(at.get("bias", 0.0))),
}


def _shrink(b, x, lambd, bias):
    c = b.ctx
    hi = onnx_lib.ggml_step(c, onnx_lib.ggml_scale_bias(c, x, 1.0, -lambd))
    lo = onnx_lib.ggml_step(c, onnx_lib.ggml_scale_bias(c, x, -1.0, -lambd))
    return onnx_lib.ggml_add(c, onnx_lib.ggml_mul(c, hi, onnx_lib.ggml_scale_bias(c, x, 1.0, -bias)),
                        onnx_lib.ggml_mul(c, lo, onnx_lib.ggml_scale_bias(c, x, 1.0, bias)))


for _name, _fn in UNARY.items():
    OPS[_name] = _unary(_fn)

# Activations ggml computes with lookup tables or fast approximations only in f16 storage: f32 is exact.


@op("Identity")
def _identity(b, node, ins, at):
    return [ins[0]]


@op("Dropout", const_inputs=(1, 2))
def _dropout(b, node, ins, at):
    """Inference: the identity, and a mask of ones. Training mode passes only with ratio 0 (the same);
    any other ratio draws a random mask, which a ggml graph cannot reproduce."""
    x = ins[0]
    training = ins[2] if len(ins) > 2 else None
    if training is not None:
        b.need_value(training.is_const, "training_mode must be known at load time", training)
        if bool(np.asarray(training.const).reshape(-1)[0]):
            ratio = ins[1] if len(ins) > 1 else None
            r = 0.5 if ratio is None else cscalar(b, ratio, "ratio")
            b.need(r == 0.0, f"training_mode with ratio {r} draws a random mask (not supported; ratio 0 is)")
    outs = [x]
    if len(node.output) > 1:
        outs.append(const(np.ones(x.shape, dtype=bool), BOOL))
    return outs


@op("Clip")
def _clip(b, node, ins, at):
    x = ins[0]
    bounds = [ins[k] if len(ins) > k else None for k in (1, 2)]
    if any(v is not None and not v.is_const for v in bounds):  # computed bounds: in the graph
        y = x
        for v, larger in zip(bounds, (True, False)):  # min first, then max (lo > hi gives max)
            if v is not None:
                t, shape = binary(b, lambda c, p, q, larger=larger: b.extremum(p, q, larger), y, v)
                y = b.out(t, shape, x.dtype)
        return [y]
    lo = cscalar(b, ins[1], "min") if len(ins) > 1 and ins[1] is not None else float(at.get("min", -FLT_MAX))
    hi = cscalar(b, ins[2], "max") if len(ins) > 2 and ins[2] is not None else float(at.get("max", FLT_MAX))
    t = f(b, x)
    if lo > hi:  # ONNX: every element becomes max
        return [b.out(onnx_lib.ggml_repeat(b.ctx, scalar_f32(b, hi), t), x.shape, x.dtype)]
    return [b.out(b.keep_nan(onnx_lib.ggml_clamp(b.ctx, t, lo, hi), t), x.shape, x.dtype)]


# -- element-wise: two or more inputs --------------------------------------------------------------------
def _bin(fn, commutative=False, out_type=None):
    def build(b, node, ins, at):
        va, vb = ins[0], ins[1]
        t, shape = binary(b, fn, va, vb, commutative)
        return [b.out(t, shape, out_type if out_type is not None else va.dtype)]
    return build


def _div(c, x, y):
    return onnx_lib.ggml_div(c, x, y)


def _int_div(c, x, y):  # ONNX integer Div truncates toward zero
    return onnx_lib.ggml_trunc(c, onnx_lib.ggml_div(c, x, y))


def _scalar_const(v: Val):
    """The float value of a one-element constant (None otherwise, or when float32 cannot hold it exactly)."""
    if v is None or not v.is_const or v.const.size != 1 or v.const.dtype.kind not in "fiub":
        return None
    x = float(np.asarray(v.const).reshape(-1)[0])
    if not np.isfinite(x) or (v.const.dtype.kind in "iub" and abs(x) > 2 ** 24):
        return None
    return x


def _affine_scalar(b, ins, fn, out_type=None):
    """Add, Sub, Mul, Div with a constant scalar as one ggml_scale_bias (x * s + c): ggml's broadcasting
    binary ops take one call per element when the second operand has a single element."""
    va, vb = ins[0], ins[1]
    for x, k, first in ((va, vb, False), (vb, va, True)):
        s = _scalar_const(k)
        if s is not None and not x.is_const and k.rank <= x.rank:
            coef = fn(s, first)
            if coef is None:
                return None
            t = f(b, x)
            src = permuted_source(t) if t.type == onnx_lib.GGML_TYPE_F32 else None
            if src is not None and onnx_lib.ggml_is_contiguous(src[0]):
                # x * s + c of a transposed copy: the copy of (src * s + c), so that a product reading the
                # transposition in place (ops_products._matmul_gemm, attention's scaled keys) skips both
                t = onnx_lib.ggml_cont(b.ctx, onnx_lib.ggml_permute(b.ctx, onnx_lib.ggml_scale_bias(b.ctx, src[0], *coef), *src[1]))
            else:
                t = onnx_lib.ggml_scale_bias(b.ctx, t, *coef)
            return [b.out(t, x.shape, out_type if out_type is not None else va.dtype)]
    return None


@op("Add")
def _add(b, node, ins, at):
    return (_affine_scalar(b, ins, lambda s, first: (1.0, s))
            or _bin(lambda c, x, y: onnx_lib.ggml_add(c, x, y), True)(b, node, ins, at))


@op("Sub")
def _sub(b, node, ins, at):
    return (_affine_scalar(b, ins, lambda s, first: (-1.0, s) if first else (1.0, -s))
            or _bin(lambda c, x, y: onnx_lib.ggml_sub(c, x, y))(b, node, ins, at))


@op("Mul")
def _mul(b, node, ins, at):
    return (_affine_scalar(b, ins, lambda s, first: (s, 0.0))
            or _bin(lambda c, x, y: onnx_lib.ggml_mul(c, x, y), True)(b, node, ins, at))


@op("Div")
def _divop(b, node, ins, at):
    integer = ins[0].dtype not in FLOAT_TYPES
    if not integer:  # x / s as x * (1 / s): within an ulp or two of the quotient
        fast = _affine_scalar(b, ins, lambda s, first: None if first or s == 0 else (1.0 / s, 0.0))
        if fast:
            return fast
    return _bin(_int_div if integer else _div)(b, node, ins, at)


def _cmp_gt(c, x, y):  # x > y
    return onnx_lib.ggml_step(c, onnx_lib.ggml_sub(c, x, y))


def _cmp_lt(c, x, y):
    return onnx_lib.ggml_step(c, onnx_lib.ggml_neg(c, onnx_lib.ggml_sub(c, x, y)))


def _cmp_eq(c, x, y):
    d = onnx_lib.ggml_sub(c, x, y)
    ne = onnx_lib.ggml_add(c, onnx_lib.ggml_step(c, d), onnx_lib.ggml_step(c, onnx_lib.ggml_neg(c, d)))
    return onnx_lib.ggml_scale_bias(c, ne, -1.0, 1.0)


def _not(c, x):
    return onnx_lib.ggml_scale_bias(c, x, -1.0, 1.0)


OPS["Greater"] = _bin(_cmp_gt, out_type=BOOL)
OPS["Less"] = _bin(_cmp_lt, out_type=BOOL)


@op("Equal")
def _equal(b, node, ins, at):
    """x == y. Where stores a constant infinity as the largest float (see _where), so a comparison with a
    constant infinity compares both sides clamped to +-FLT_MAX: a row that Where masked with -inf equals
    -inf (the test attention's expanded function makes for fully masked rows)."""
    va, vb = ins[0], ins[1]
    inf = [v.is_const and v.const.dtype.kind == "f" and np.isinf(v.const).any() for v in (va, vb)]
    if not any(inf):
        return _bin(_cmp_eq, True, out_type=BOOL)(b, node, ins, at)

    def finite(v):
        if v.is_const:
            return const(np.clip(v.const.astype(np.float32), -FLT_MAX, FLT_MAX), v.dtype)
        return Val(v.shape, v.dtype, t=onnx_lib.ggml_clamp(b.ctx, f(b, v), -FLT_MAX, FLT_MAX))
    return _bin(_cmp_eq, True, out_type=BOOL)(b, node, [finite(va), finite(vb)], at)


OPS["GreaterOrEqual"] = _bin(lambda c, x, y: _not(c, _cmp_lt(c, x, y)), out_type=BOOL)
OPS["LessOrEqual"] = _bin(lambda c, x, y: _not(c, _cmp_gt(c, x, y)), out_type=BOOL)
OPS["And"] = _bin(lambda c, x, y: onnx_lib.ggml_mul(c, x, y), True, out_type=BOOL)
OPS["Or"] = _bin(lambda c, x, y: onnx_lib.ggml_step(c, onnx_lib.ggml_add(c, x, y)), True, out_type=BOOL)
OPS["Xor"] = _bin(lambda c, x, y: onnx_lib.ggml_step(c, onnx_lib.ggml_abs(c, onnx_lib.ggml_sub(c, x, y))), True, out_type=BOOL)
OPS["Not"] = _unary(lambda b, x, at: _not(b.ctx, x))


def _variadic(make, post=None):
    """ONNX's n-ary element-wise ops, folded pairwise: make(builder) gives fn(ctx, x, y)."""
    def build(b, node, ins, at):
        fn = make(b)
        vals = [v for v in ins if v is not None]
        acc = vals[0]
        if len(vals) == 1:
            t = f(b, acc)
            shape = acc.shape
        for v in vals[1:]:
            t, shape = binary(b, fn, acc, v, True)
            acc = Val(shape, vals[0].dtype, t=t)
        if post is not None:
            t = post(b, t, len(vals))
        return [b.out(t, shape, vals[0].dtype)]
    return build


OPS["Max"] = _variadic(lambda b: lambda c, x, y: b.extremum(x, y, True))  # NaN where any operand is
OPS["Min"] = _variadic(lambda b: lambda c, x, y: b.extremum(x, y, False))
OPS["Sum"] = _variadic(lambda b: onnx_lib.ggml_add)
OPS["Mean"] = _variadic(lambda b: onnx_lib.ggml_add, post=lambda b, t, n: onnx_lib.ggml_scale(b.ctx, t, 1.0 / n))


@op("Pow")
def _pow(b, node, ins, at):
    x, y = ins
    if y.is_const and y.size == 1:
        e = float(np.asarray(y.const).reshape(-1)[0])
        t = f(b, x)
        c = b.ctx
        shape = broadcast_shape(b, x.shape, y.shape)
        r = None
        if e == 1.0:
            r = t
        elif e == 2.0:
            r = onnx_lib.ggml_sqr(c, t)
        elif e == 0.5:
            r = onnx_lib.ggml_sqrt(c, t)
        elif e == 3.0:
            r = onnx_lib.ggml_mul(c, onnx_lib.ggml_sqr(c, t), t)
        elif e == 0.0:
            r = onnx_lib.ggml_repeat(c, scalar_f32(b, 1.0), t)
        elif e == -1.0:
            r = _recip(b, t)
        if r is not None:
            return [b.out(reshape(b, r, shape), shape, x.dtype)]
    # exp(y log x): x > 0, or x < 0 with an integer exponent (sign restored for odd ones)
    t, shape = binary(b, lambda c, lx, yy: onnx_lib.ggml_exp(c, onnx_lib.ggml_mul(c, lx, yy)),
                      Val(x.shape, x.dtype, t=onnx_lib.ggml_log(b.ctx, onnx_lib.ggml_abs(b.ctx, f(b, x)))), y)
    if not (x.is_const and (x.const >= 0).all()):
        # sign: -1 where x < 0 and y is odd: 1 - 2 * step(-x) * (|y| mod 2)
        c = b.ctx
        neg = Val(x.shape, x.dtype, t=onnx_lib.ggml_step(c, onnx_lib.ggml_neg(c, f(b, x))))
        if y.is_const:
            odd = const((np.abs(np.asarray(y.const, dtype=np.float64)) % 2 == 1).astype(np.float32))
        else:
            ay = onnx_lib.ggml_abs(c, f(b, y))
            half = onnx_lib.ggml_scale(c, ay, 0.5)
            odd = Val(y.shape, y.dtype, t=onnx_lib.ggml_scale(c, onnx_lib.ggml_sub(c, half, onnx_lib.ggml_floor(c, half)), 2.0))
        s, _ = binary(b, lambda c_, p, q: onnx_lib.ggml_mul(c_, p, q), neg, odd, True)
        sign = onnx_lib.ggml_scale_bias(c, s, -2.0, 1.0)
        t, shape = binary(b, lambda c_, p, q: onnx_lib.ggml_mul(c_, p, q), Val(shape, x.dtype, t=t),
                          Val(shape, x.dtype, t=reshape(b, sign, shape)), True)
    return [b.out(t, shape, x.dtype)]


@op("Mod")
def _mod(b, node, ins, at):
    fmod = int(at.get("fmod", 0))
    b.need(fmod in (0, 1), f"Mod: fmod must be 0 or 1, got {fmod}")
    rnd = onnx_lib.ggml_trunc if fmod else onnx_lib.ggml_floor
    va, vb = ins
    c = b.ctx

    def ew(fn, x, y):  # element-wise with ONNX broadcasting, as a Val
        t, s = binary(b, fn, x, y)
        return Val(s, va.dtype, t=t)

    def un(fn, x):
        return Val(x.shape, va.dtype, t=fn(f(b, x)))

    mul = lambda c_, x, y: onnx_lib.ggml_mul(c_, x, y)  # noqa: E731
    if va.dtype not in FLOAT_TYPES:  # integers: a - b * round(a / b), trunc (fmod) or floor (Python's %)
        q = un(lambda t: rnd(c, t), ew(lambda c_, x, y: onnx_lib.ggml_div(c_, x, y), va, vb))
        r = ew(lambda c_, x, y: onnx_lib.ggml_sub(c_, x, y), va, ew(mul, q, vb))
        return [b.out(f(b, r), r.shape, va.dtype)]
    # Floats follow numpy (fmod=0) and C's fmod (fmod=1) on infinities: a finite a modulo +-inf is a,
    # or (fmod=0, signs differ) b itself. The formula would give inf * 0 = NaN there, so it runs on b
    # clamped to finite values and the infinite-b results are selected with 0/1 masks (no inf * 0).
    binf = un(lambda t: onnx_lib.ggml_step(c, onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_abs(c, t), 1.0, -FLT_MAX)), vb)
    bfin = un(lambda t: onnx_lib.ggml_clamp(c, t, -FLT_MAX, FLT_MAX), vb)  # finite for +-inf, and NaN on some backends
    q = un(lambda t: rnd(c, t), ew(lambda c_, x, y: onnx_lib.ggml_div(c_, x, y), va, bfin))
    r = ew(lambda c_, x, y: onnx_lib.ggml_sub(c_, x, y), va, ew(mul, q, bfin))  # finite wherever a is and b is +-inf
    r = ew(mul, r, un(lambda t: onnx_lib.ggml_scale_bias(c, t, -1.0, 1.0), binf))
    if fmod:
        at_inf = ew(mul, va, binf)
    else:
        opp = un(lambda t: onnx_lib.ggml_step(c, onnx_lib.ggml_neg(c, t)), ew(mul, va, bfin))  # a * b < 0
        same = un(lambda t: onnx_lib.ggml_scale_bias(c, t, -1.0, 1.0), opp)
        # a where the signs agree; b = +-inf where they differ, as FLT_MAX * 2 (overflows to inf)
        big = un(lambda t: onnx_lib.ggml_scale(c, t, 2.0), ew(mul, ew(mul, bfin, opp), binf))
        at_inf = ew(lambda c_, x, y: onnx_lib.ggml_add(c_, x, y), ew(mul, ew(mul, va, same), binf), big)
    r = ew(lambda c_, x, y: onnx_lib.ggml_add(c_, x, y), r, at_inf)
    # a NaN b gives NaN: multiply by (1 - isnan) / (1 - isnan), 1 or 0/0 (clamp may have dropped the NaN)
    num = un(lambda t: onnx_lib.ggml_step(c, onnx_lib.ggml_scale_bias(c, onnx_lib.ggml_abs(c, t), 1.0, 1.0)), vb)
    keep = un(lambda t: onnx_lib.ggml_div(c, t, t), num)
    r = ew(mul, r, keep)
    return [b.out(f(b, r), r.shape, va.dtype)]


@op("Where")
def _where(b, node, ins, at):
    cnd, x, y = ins
    broadcast_shape(b, cnd.shape, x.shape, y.shape)  # all three must broadcast together

    def finite(v):  # 0 * inf is NaN: a constant infinity becomes the largest float (exp(-FLT_MAX) is 0 too)
        if v.is_const and np.issubdtype(v.const.dtype, np.floating) and np.isinf(v.const).any():
            return const(np.clip(v.const, -FLT_MAX, FLT_MAX).astype(np.float32), v.dtype)
        return v
    x, y = finite(x), finite(y)
    shape = broadcast_shape(b, cnd.shape, x.shape, y.shape)
    n = int(np.prod(shape, dtype=np.int64))
    if (not x.is_const or not y.is_const) and n < 2 ** 23 and len(shape) <= 4:
        return [_select(b, cnd, x, y, shape, n)]
    # c * x + (1 - c) * y: exact for any finite x and y (y + c * (x - y) loses x next to a huge y)
    cx, sx = binary(b, lambda c, p, q: onnx_lib.ggml_mul(c, p, q), x, cnd, True)
    notc = Val(cnd.shape, cnd.dtype, t=onnx_lib.ggml_scale_bias(b.ctx, f(b, cnd), -1.0, 1.0))
    cy, sy = binary(b, lambda c, p, q: onnx_lib.ggml_mul(c, p, q), y, notc, True)
    t, shape2 = binary(b, lambda c, p, q: onnx_lib.ggml_add(c, p, q), Val(sx, x.dtype, t=cx), Val(sy, x.dtype, t=cy),
                       True)
    return [b.out(t, shape2, x.dtype)]


def _select(b, cnd, x, y, shape, n):
    """Where as a true selection: x and y side by side as 2n one-element rows, ggml_get_rows picks
    row i (x) or n + i (y). A computed operand may hold inf or NaN where it is not selected (a softmax
    over a fully masked row), which the arithmetic select c * x + (1 - c) * y would spread."""
    c = b.ctx

    def full(v):
        return reshape(b, repeat_to(b, reshape(b, b.tensor(v), (1,) * (len(shape) - v.rank) + v.shape), shape), (n, 1))
    both = onnx_lib.ggml_concat(c, full(x), full(y), 1)  # ne [1, 2n]
    pick = onnx_lib.ggml_scale_bias(c, full(cnd), -float(n), float(n))  # 0 where cnd, n elsewhere
    idx = onnx_lib.ggml_add(c, pick, b.weight(np.arange(n, dtype=np.float32).reshape(n, 1)))  # exact below 2**24
    rows = onnx_lib.ggml_get_rows(c, both, onnx_lib.ggml_cast(c, reshape(b, idx, (n,)), onnx_lib.GGML_TYPE_I32))
    return b.out(reshape(b, rows, shape), shape, x.dtype)


@op("PRelu")
def _prelu(b, node, ins, at):
    x, slope = ins
    c = b.ctx
    t = f(b, x)
    neg = Val(x.shape, x.dtype, t=onnx_lib.ggml_neg(c, onnx_lib.ggml_relu(c, onnx_lib.ggml_neg(c, t))))  # min(x, 0)
    m, shape = binary(b, lambda c_, p, q: onnx_lib.ggml_mul(c_, p, q), neg, slope, True)
    r, shape = binary(b, lambda c_, p, q: onnx_lib.ggml_add(c_, p, q), Val(shape, x.dtype, t=m),
                      Val(x.shape, x.dtype, t=b.relu(t)), True)  # NaN kept here
    return [b.out(r, shape, x.dtype)]


# -- casts ------------------------------------------------------------------------------------------------
def _cast_to(b, x: Val, to: int, saturate: bool = True):
    if x.is_const:
        if to in FLOAT8_TYPES:
            return const(float8.round_const(x.const, to, saturate), to)
        return const(x.const.astype(np_dtype(to)), to)
    b.need(to != TensorProto.STRING, "casts to string are not supported")
    t = f(b, x)
    c = b.ctx
    if to in FLOAT8_TYPES:
        if x.dtype != to:
            t = float8.round_in_graph(b, t, to, saturate)
    elif to == BOOL:
        t = onnx_lib.ggml_step(c, onnx_lib.ggml_abs(c, t))
    elif to not in FLOAT_TYPES and x.dtype in FLOAT_TYPES:
        t = onnx_lib.ggml_trunc(c, t)
    elif to == TensorProto.FLOAT16 and x.dtype != TensorProto.FLOAT16:  # round through half precision
        t = onnx_lib.ggml_cast(c, onnx_lib.ggml_cast(c, t, onnx_lib.GGML_TYPE_F16), onnx_lib.GGML_TYPE_F32)
    elif to == TensorProto.BFLOAT16 and x.dtype != TensorProto.BFLOAT16:
        t = onnx_lib.ggml_cast(c, onnx_lib.ggml_cast(c, t, onnx_lib.GGML_TYPE_BF16), onnx_lib.GGML_TYPE_F32)
    return b.out(t, x.shape, to)


@op("Cast")
def _cast(b, node, ins, at):
    return [_cast_to(b, ins[0], int(at["to"]), bool(at.get("saturate", 1)))]


@op("CastLike")
def _castlike(b, node, ins, at):
    return [_cast_to(b, ins[0], ins[1].dtype, bool(at.get("saturate", 1)))]
