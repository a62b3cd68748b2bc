"""ONNX's normalisations: BatchNormalization, LayerNormalization, RMSNormalization,
InstanceNormalization, GroupNormalization, LpNormalization.
"""
from __future__ import annotations

import numpy as np

from .onnx_lib import onnx_lib
from .graph import Val, const
from .layout import (binary, permute, reshape, scalar_f32, to_rows)
from .op_table import FLT_MAX, f, norm_axis, op


# -- normalisations -------------------------------------------------------------------------------------
def _channel(b, v: Val, C, rank):
    return reshape(b, b.tensor(v), (1, C) + (1,) * (rank - 2))


@op("BatchNormalization")
def _batchnorm(b, node, ins, at):
    x, scale, bias, mean, var = ins[:5]
    b.need(x.rank >= 2, f"BatchNormalization needs (N, C, ...), got rank {x.rank}")
    C = x.shape[1]
    for name, v in zip(("scale", "B", "input_mean", "input_var"), ins[1:5]):
        b.need(v is not None and v.size == C, f"{name} must have {C} values (one per channel)")
    training = int(at.get("training_mode", 0))
    b.need(training in (0, 1), f"training_mode must be 0 or 1, got {training}")
    eps = float(at.get("epsilon", 1e-5))
    if training:
        return _batchnorm_training(b, node, x, scale, bias, mean, var, eps, float(at.get("momentum", 0.9)))
    if all(v.is_const for v in (scale, bias, mean, var)):  # one multiply and one add
        s = (scale.const.astype(np.float64) / np.sqrt(var.const.astype(np.float64) + eps))
        sh = bias.const.astype(np.float64) - mean.const.astype(np.float64) * s
        y = onnx_lib.ggml_mul(b.ctx, f(b, x), b.weight(s.astype(np.float32).reshape((1, C) + (1,) * (x.rank - 2))))
        y = onnx_lib.ggml_add(b.ctx, y, b.weight(sh.astype(np.float32).reshape((1, C) + (1,) * (x.rank - 2))))
    else:
        c = b.ctx
        inv = onnx_lib.ggml_sqrt(c, onnx_lib.ggml_scale_bias(c, _channel(b, var, C, x.rank), 1.0, eps))
        y = onnx_lib.ggml_div(c, onnx_lib.ggml_sub(c, f(b, x), _channel(b, mean, C, x.rank)), inv)
        y = onnx_lib.ggml_add(c, onnx_lib.ggml_mul(c, y, _channel(b, scale, C, x.rank)), _channel(b, bias, C, x.rank))
    return [b.out(y, x.shape, x.dtype)]


def _batchnorm_training(b, node, x, scale, bias, mean, var, eps, momentum):
    """training_mode=1: normalised by the batch's statistics per channel (over N and the spatial axes,
    population variance), and the running statistics updated: momentum * input + (1 - momentum) * batch."""
    c = b.ctx
    C = x.shape[1]
    rows, _, _ = to_rows(b, b.tensor(x), x.shape, [k for k in range(x.rank) if k != 1])  # ne [N*spatial, C]
    mu = onnx_lib.ggml_mean(c, rows)  # ne [1, C]
    d = onnx_lib.ggml_sub(c, rows, mu)
    sig = onnx_lib.ggml_mean(c, onnx_lib.ggml_sqr(c, d))
    chan = (1, C) + (1,) * (x.rank - 2)
    inv = onnx_lib.ggml_sqrt(c, onnx_lib.ggml_scale_bias(c, reshape(b, sig, chan), 1.0, eps))
    y = onnx_lib.ggml_div(c, onnx_lib.ggml_sub(c, f(b, x), reshape(b, mu, chan)), inv)
    y = onnx_lib.ggml_add(c, onnx_lib.ggml_mul(c, y, _channel(b, scale, C, x.rank)), _channel(b, bias, C, x.rank))
    outs = [b.out(y, x.shape, x.dtype)]
    for running, batch in ((mean, mu), (var, sig)):
        r = onnx_lib.ggml_add(c, onnx_lib.ggml_scale(c, reshape(b, b.tensor(running), (C,)), momentum),
                         onnx_lib.ggml_scale(c, reshape(b, batch, (C,)), 1.0 - momentum))
        outs.append(b.out(r, (C,), x.dtype))
    return outs[:max(1, len(node.output))]


def _affine(b, y, shape, scale, bias, dtype):
    v = Val(shape, dtype, t=y)
    if scale is not None:
        t, shp = binary(b, lambda c, p, q: onnx_lib.ggml_mul(c, p, q), v, scale, True)
        v = Val(shp, dtype, t=t)
    if bias is not None:
        t, shp = binary(b, lambda c, p, q: onnx_lib.ggml_add(c, p, q), v, bias, True)
        v = Val(shp, dtype, t=t)
    return b.out(v.t, v.shape, dtype)


@op("LayerNormalization")
def _layernorm(b, node, ins, at):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    axis = norm_axis(b, at.get("axis", -1), x.rank)
    eps = float(at.get("epsilon", 1e-5))
    R = int(np.prod(x.shape[axis:], dtype=np.int64))
    rows = reshape(b, b.tensor(x), (x.size // R, R))
    k = b.kernels
    if (k is not None and k.layernorm is not None and len(node.output) == 1 and scale.size == R
            and (bias is None or bias.size == R)):  # one pass: normalise, scale, shift
        vec = lambda v: None if v is None else reshape(b, b.tensor(v), (R,))  # noqa: E731
        y = b.kernel_node(k.layernorm(b.ctx, rows, vec(scale), vec(bias), eps), "layernorm")
        return [b.out(reshape(b, y, x.shape), x.shape, x.dtype)]
    y = reshape(b, onnx_lib.ggml_norm(b.ctx, rows, eps), x.shape)
    outs = [_affine(b, y, x.shape, scale, bias, x.dtype)]
    if len(node.output) > 1:
        sshape = x.shape[:axis] + (1,) * (x.rank - axis)
        mean = onnx_lib.ggml_mean(b.ctx, rows)
        var = onnx_lib.ggml_mean(b.ctx, onnx_lib.ggml_sqr(b.ctx, onnx_lib.ggml_sub(b.ctx, rows, mean)))
        inv = onnx_lib.ggml_sqrt(b.ctx, onnx_lib.ggml_scale_bias(b.ctx, var, 1.0, eps))
        inv = onnx_lib.ggml_div(b.ctx, onnx_lib.ggml_repeat(b.ctx, scalar_f32(b, 1.0), inv), inv)
        outs += [b.out(reshape(b, mean, sshape), sshape, x.dtype), b.out(reshape(b, inv, sshape), sshape, x.dtype)]
    return outs[:len(node.output)]


@op("RMSNormalization")
def _rmsnorm(b, node, ins, at):
    x, scale = ins[0], ins[1]
    axis = norm_axis(b, at.get("axis", -1), x.rank)
    eps = float(at.get("epsilon", 1e-5))
    R = int(np.prod(x.shape[axis:], dtype=np.int64))
    rows = reshape(b, b.tensor(x), (x.size // R, R))
    y = reshape(b, onnx_lib.ggml_rms_norm(b.ctx, rows, eps), x.shape)
    return [_affine(b, y, x.shape, scale, None, x.dtype)]


@op("InstanceNormalization")
def _instancenorm(b, node, ins, at):
    x, scale, bias = ins
    eps = float(at.get("epsilon", 1e-5))
    N, C = x.shape[:2]
    S = x.size // (N * C)
    y = reshape(b, onnx_lib.ggml_norm(b.ctx, reshape(b, b.tensor(x), (N * C, S)), eps), x.shape)
    y = onnx_lib.ggml_mul(b.ctx, y, _channel(b, scale, C, x.rank))
    y = onnx_lib.ggml_add(b.ctx, y, _channel(b, bias, C, x.rank))
    return [b.out(y, x.shape, x.dtype)]


@op("GroupNormalization")
def _groupnorm(b, node, ins, at):
    x, scale, bias = ins
    G = int(at["num_groups"])
    eps = float(at.get("epsilon", 1e-5))
    N, C = x.shape[:2]
    b.need(C % G == 0, f"{C} channels do not split into {G} groups")
    S = x.size // (N * C)
    rows = reshape(b, b.tensor(x), (N * G, (C // G) * S))
    y = reshape(b, onnx_lib.ggml_norm(b.ctx, rows, eps), x.shape)
    if scale.size == G and G != C:  # opset 18: one scale and bias per group
        b.need_value(scale.is_const and bias.is_const, "per-group scale and bias must be constant", scale, bias)
        scale = const(np.repeat(scale.const, C // G), scale.dtype)
        bias = const(np.repeat(bias.const, C // G), bias.dtype)
    y = onnx_lib.ggml_mul(b.ctx, y, _channel(b, scale, C, x.rank))
    y = onnx_lib.ggml_add(b.ctx, y, _channel(b, bias, C, x.rank))
    return [b.out(y, x.shape, x.dtype)]


@op("LpNormalization")
def _lpnorm(b, node, ins, at):
    x = ins[0]
    axis = norm_axis(b, at.get("axis", -1), x.rank)
    p = int(at.get("p", 2))
    b.need(p in (1, 2), f"p={p}")
    rows, _, perm = to_rows(b, b.tensor(x), x.shape, [axis])
    c = b.ctx
    n = onnx_lib.ggml_sum_rows(c, onnx_lib.ggml_abs(c, rows)) if p == 1 else onnx_lib.ggml_sqrt(c, onnx_lib.ggml_sum_rows(c, onnx_lib.ggml_sqr(c, rows)))
    y = onnx_lib.ggml_div(c, rows, onnx_lib.ggml_clamp(c, n, 1e-30, FLT_MAX))  # a zero vector stays zero
    moved = tuple(x.shape[q] for q in perm)
    return [b.out(permute(b, reshape(b, y, moved), list(np.argsort(perm))), x.shape, x.dtype)]
