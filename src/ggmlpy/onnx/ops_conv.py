"""ONNX's convolutions: Conv (with its fused epilogues: bias, residual, ReLU, a following pooling node)
and ConvTranspose, on ggmlpy's conv kernels or ggml's im2col and products.
"""
from __future__ import annotations

import numpy as np

from .. import kernels
from .onnx_lib import onnx_lib
from .graph import Val
from .layout import (cont, pad_zero, permute, reshape, slice_axis)
from .op_table import op
from .ops_pool import _as_2d, _conv_pads, _pool_attrs, _pool_outs


COLUMNS_FIRST = True  # conv product order where the builder does not choose (see conv2d)
# conv.c's pixel-major convolution: blocks of this many 16-pixel segments (by 24 / it channels);
# 3 is the fastest on ResNet-18's wide planes (docs/benchmarks.md; Kernels.packed_conv_kind picks the
# kernel per layer)
PIXEL_VECTORS = 3
CHANNEL_VECTORS = 4  # conv2d_pixels' block 4: channels in the lanes, read from the padded input ("lanes")


# -- convolution ----------------------------------------------------------------------------------------


def conv2d(b, x, x_shape, w_arr_or_val, w_shape, strides, pads_b, pads_e, dils, group, bias=None, residual=None,
           relu=False):
    """NCHW conv of ggml tensor x with weights (M, C/group, kH, kW), then + bias (a Val of M values),
    + residual (a Val of the output's shape), ReLU; returns tensor, shape.
    On ggml's CPU backend with ggmlpy's kernels, one conv.c node does it all (see conv_kernel)."""
    N, C, H, W = x_shape
    M, Cg, kH, kW = w_shape
    b.need(C == Cg * group and M % group == 0, f"conv: {C} input channels, weights {list(w_shape)}, group {group}")
    # negative pads crop the input
    crop_b = [max(0, -p) for p in pads_b]
    crop_e = [max(0, -p) for p in pads_e]
    pads_b = [max(0, p) for p in pads_b]
    pads_e = [max(0, p) for p in pads_e]
    shape = (N, C, H, W)
    for ax in (0, 1):
        if crop_b[ax] or crop_e[ax]:
            x, shape = slice_axis(b, x, shape, 2 + ax, crop_b[ax], shape[2 + ax] - crop_e[ax])
    out = conv_kernel(b, x, shape, w_arr_or_val, w_shape, strides, pads_b, pads_e, dils, group, bias, residual, relu)
    if out is not None:
        return out
    y, shape = _conv2d_ggml(b, x, shape, w_arr_or_val, w_shape, strides, pads_b, pads_e, dils, group)
    y = _add_bias(b, y, bias, shape)
    if residual is not None:
        b.need(tuple(residual.shape) == shape, f"conv residual of shape {list(residual.shape)}, output {list(shape)}")
        y = onnx_lib.ggml_add(b.ctx, y, reshape(b, b.tensor(residual), shape))
    if relu:
        y = b.relu(y)
    return y, shape


def conv_kernel(b, x, shape, w_arr_or_val, w_shape, strides, pads_b, pads_e, dils, group, bias=None, residual=None,
                relu=False):
    """The convolution as one node of ggmlpy's conv.c kernel (patches built a cache-sized block at a
    time and multiplied at once by OpenBLAS, bias, residual and ReLU applied to the block), or None
    where it does not apply: not ggml's CPU backend, no kernels, f16 weights, a residual that is not
    of the output's shape (a constant one). Pads are non-negative here."""
    k = b.kernels
    if k is None or k.conv2d is None:
        return None
    N, C, H, W = shape
    M, Cg, kH, kW = w_shape
    is_const = isinstance(w_arr_or_val, np.ndarray)
    if is_const and b.f16_weights and w_arr_or_val.size >= 256:
        return None  # dtype="f16" asked for half-precision weights: ggml's products read them
    OH, OW = _conv_out_hw((H, W), (kH, kW), strides, pads_b, pads_e, dils)
    b.need(OH > 0 and OW > 0, "conv output would be empty")
    out_shape = (N, M, OH, OW)
    if residual is not None and residual.is_const:
        return None
    bt = None if bias is None else _conv_bias(b, bias, M)
    rt = None if residual is None else reshape(b, b.tensor(residual), out_shape)
    kind = _packed_kind(k, (OH, OW), w_shape, group, strides, pads_b, pads_e, dils) if is_const else None
    if kind in ("pixels", "lanes"):
        vectors = PIXEL_VECTORS if kind == "pixels" else CHANNEL_VECTORS
        wp = b.weight(k.pack_conv_pixels(np.asarray(w_arr_or_val, dtype=np.float32), group, vectors))
        y = k.conv2d_pixels(b.ctx, cont(b, x), wp, M, (kH, kW), tuple(strides), (pads_b[0], pads_b[1]), tuple(dils),
                            (OH, OW), group, bt, rt, relu, vectors)
        return b.kernel_node(y, "conv2d"), out_shape
    if kind == "channels":
        wp = b.weight(k.pack_conv(np.asarray(w_arr_or_val, dtype=np.float32), group))
        y = k.conv2d_packed(b.ctx, cont(b, x), wp, M, (kH, kW), tuple(strides), (pads_b[0], pads_b[1]), tuple(dils),
                            (OH, OW), group, bt, rt, relu)
        return b.kernel_node(y, "conv2d"), out_shape
    if is_const:
        w = b.weight(np.ascontiguousarray(w_arr_or_val, dtype=np.float32).reshape(M, Cg * kH * kW))
    else:
        w = onnx_lib.ggml_reshape_2d(b.ctx, cont(b, w_arr_or_val), Cg * kH * kW, M)
    y = k.conv2d(b.ctx, cont(b, x), w, (kH, kW), tuple(strides), (pads_b[0], pads_b[1]), tuple(dils), (OH, OW),
                 group, bt, rt, relu)
    return b.kernel_node(y, "conv2d"), out_shape


def _conv_out_hw(in_hw, k_hw, strides, pads_b, pads_e, dils) -> tuple:
    """A convolution's output planes (OH, OW) (not positive where the kernel does not fit)."""
    return tuple((n + p + q - d * (kk - 1) - 1) // s + 1
                 for n, kk, s, p, q, d in zip(in_hw, k_hw, strides, pads_b, pads_e, dils))


def _conv_bias(b, bias, M: int):
    """A convolution's bias (M values) as conv.c's kernels read it: a 1-D f32 tensor, a weight when constant."""
    if bias.is_const:
        return b.weight(np.asarray(bias.const, dtype=np.float32).reshape(M))
    return onnx_lib.ggml_reshape_1d(b.ctx, cont(b, b.tensor(bias)), M)


def _packed_kind(k, out_hw, w_shape, group, strides, pads_b, pads_e, dils):
    """Kernels.packed_conv_kind for a convolution of weights (M, C/group, kH, kW) with constant weights."""
    M, Cg, kH, kW = w_shape
    return k.packed_conv_kind(out_hw, M // group, *kernels.direct_planes(out_hw, (kH, kW), strides, dils, Cg),
                              stride=strides[0], taps=Cg * kH * kW, unpadded=not any(pads_b) and not any(pads_e))


def _conv2d_ggml(b, x, shape, w_arr_or_val, w_shape, strides, pads_b, pads_e, dils, group):
    """ggml's own convolution: im2col, then a product per group."""
    N, C, H, W = shape
    M, Cg, kH, kW = w_shape
    if pads_b != pads_e:
        x, shape = pad_zero(b, x, shape, [0, 0] + pads_b, [0, 0] + pads_e)
        p = [0, 0]
    else:
        p = pads_b
    _, _, H, W = shape
    OH, OW = _conv_out_hw((H, W), (kH, kW), strides, p, p, dils)
    b.need(OH > 0 and OW > 0, "conv output would be empty")
    x = cont(b, x)
    is_const = isinstance(w_arr_or_val, np.ndarray)
    outs = []
    Mg = M // group
    for g in range(group):
        xg = x if group == 1 else slice_axis(b, x, shape, 1, g * Cg, (g + 1) * Cg)[0]
        if is_const:
            wg = b.weight(np.ascontiguousarray(w_arr_or_val[g * Mg:(g + 1) * Mg], dtype=np.float32),
                          onnx_lib.GGML_TYPE_F16 if (b.f16_weights and w_arr_or_val.size >= 256) else onnx_lib.GGML_TYPE_F32)
        else:
            wg = cont(b, w_arr_or_val) if group == 1 else slice_axis(b, w_arr_or_val, w_shape, 0, g * Mg, (g + 1) * Mg)[0]
        # im2col in f32 (ggml_conv_2d's default is f16 columns: 1e-3 off), then one product
        cols = onnx_lib.ggml_im2col(b.ctx, wg, xg, strides[1], strides[0], p[1], p[0], dils[1], dils[0], True,
                               onnx_lib.GGML_TYPE_F32)  # ne [Cg*kH*kW, OW, OH, N]
        kk = Cg * kH * kW
        cols2 = onnx_lib.ggml_reshape_2d(b.ctx, cols, kk, OW * OH * N)
        w2 = onnx_lib.ggml_reshape_2d(b.ctx, wg, kk, Mg)
        # columns first: the product comes out as ne [OW*OH*N, Mg], the output's layout. On the CPU without
        # BLAS, ggml's own kernel is faster the other way round, permute included (docs/benchmarks.md)
        if wg.type == onnx_lib.GGML_TYPE_F32 and getattr(b, "columns_first", COLUMNS_FIRST):
            y = onnx_lib.ggml_mul_mat(b.ctx, cols2, w2)
            y = onnx_lib.ggml_reshape_4d(b.ctx, y, OW, OH, N, Mg)
            if N > 1:  # to ne [OW, OH, Mg, N]; with one image that is a reshape
                y = onnx_lib.ggml_cont(b.ctx, onnx_lib.ggml_permute(b.ctx, y, 0, 1, 3, 2))
            else:
                y = onnx_lib.ggml_reshape_4d(b.ctx, y, OW, OH, Mg, 1)
        else:  # f16 weights must be the first operand of ggml_mul_mat
            y = onnx_lib.ggml_mul_mat(b.ctx, w2, cols2)  # ne [Mg, OW*OH*N]
            y = onnx_lib.ggml_reshape_4d(b.ctx, y, Mg, OW, OH, N)
            y = onnx_lib.ggml_cont(b.ctx, onnx_lib.ggml_permute(b.ctx, y, 2, 0, 1, 3))  # ne [OW, OH, Mg, N]
        outs.append(y)
    y = outs[0]
    for o in outs[1:]:
        y = onnx_lib.ggml_concat(b.ctx, y, o, 2)
    return y, (N, M, OH, OW)


def _ints2(at, key, nd, default):
    v = [int(a) for a in at.get(key, [default] * nd)]
    return ([1] + v) if nd == 1 and key in ("strides", "dilations", "kernel_shape") else v


def _add_bias(b, y, bias, shape):
    """y (N, M, OH, OW) + a per-channel bias. A constant bias is stored repeated along the rows
    (ne [OW, 1, M, 1]): ggml adds a whole row per call, where a (1, M, 1, 1) bias costs one call
    per element (15 % of a ResNet-18's time)."""
    if bias is None:
        return y
    if bias.is_const:
        rows = np.repeat(np.asarray(bias.const, dtype=np.float32).reshape(1, -1, 1, 1), shape[3], axis=3)
        return onnx_lib.ggml_add(b.ctx, y, b.weight(rows))
    return onnx_lib.ggml_add(b.ctx, y, reshape(b, b.tensor(bias), (1, bias.size, 1, 1)))


@op("Conv")
def _conv(b, node, ins, at, residual=None, relu=False):
    """Conv; conv_epilogue builds it with the Add and Relu that follow it (see fusion.find_conv_epilogues)."""
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    nd = x.rank - 2
    xt, xs = _as_2d(b, x)
    ks = list(w.shape[2:])
    strides = [int(s) for s in at.get("strides", [1] * nd)]
    dils = [int(d) for d in at.get("dilations", [1] * nd)]
    pb, pe = _conv_pads(b, at, list(x.shape[2:]), ks, strides, dils)
    if nd == 1:
        strides, dils, pb, pe, ks = [1] + strides, [1] + dils, [0] + pb, [0] + pe, [1] + ks
    w_shape = (w.shape[0], w.shape[1], ks[0], ks[1])
    wsrc = np.asarray(w.const, dtype=np.float32).reshape(w_shape) if w.is_const else reshape(b, b.tensor(w), w_shape)
    if residual is not None and nd == 1:
        r4 = (residual.shape[0], residual.shape[1], 1, residual.shape[2])
        residual = Val(r4, residual.dtype, None if residual.const is None else residual.const.reshape(r4), residual.t)
    y, shape = conv2d(b, xt, xs, wsrc, w_shape, strides, pb, pe, dils, int(at.get("group", 1)), bias,
                      residual, relu)
    if nd == 1:
        shape = (shape[0], shape[1], shape[3])
        y = reshape(b, y, shape)
    return [b.out(y, shape, x.dtype)]


def conv_epilogue(b, node, ins, at, residual, relu):
    """Conv, then Add(residual) (when not None) and Relu (when relu), as conv.c's one node; None where
    that does not apply (no conv kernel, a residual that is constant or not of the output's shape): the
    caller then builds the nodes one by one."""
    if b.kernels is None or b.kernels.conv2d is None:
        return None
    x, w = ins[0], ins[1]
    if x.rank not in (3, 4) or w.rank != x.rank or len(ins) > 2 and ins[2] is not None and ins[2].rank != 1:
        return None  # leave the errors to the Conv builder
    if residual is not None:
        nd = x.rank - 2
        ks = list(w.shape[2:])
        strides = [int(s) for s in at.get("strides", [1] * nd)]
        dils = [int(d) for d in at.get("dilations", [1] * nd)]
        pb, pe = _conv_pads(b, at, list(x.shape[2:]), ks, strides, dils)
        spatial = tuple((x.shape[2 + i] + pb[i] + pe[i] - dils[i] * (ks[i] - 1) - 1) // strides[i] + 1
                        for i in range(nd))
        if residual.is_const or tuple(residual.shape) != (x.shape[0], w.shape[0]) + spatial:
            return None
    return _conv(b, node, ins, at, residual, relu)


def _dilate(b, t, shape, axis, s):
    """Insert s-1 zeros between the elements of one axis (the input of a transposed convolution)."""
    if s == 1:
        return t, shape
    pre, L, post = shape[:axis], shape[axis], shape[axis + 1:]
    P, Q = int(np.prod(pre, dtype=np.int64)), int(np.prod(post, dtype=np.int64))
    x, sh = pad_zero(b, reshape(b, t, (P, L, 1, Q)), (P, L, 1, Q), [0, 0, 0, 0], [0, 0, s - 1, 0])
    x, sh = slice_axis(b, reshape(b, x, (P, L * s, Q)), (P, L * s, Q), 1, 0, L * s - (s - 1))
    out = pre + (L * s - (s - 1),) + post
    return reshape(b, x, out), out


def _transpose_geometry(b, at, nd, ins_sp, ks):
    """strides, dilations, output_padding, and the pads (begin, end) of a ConvTranspose with nd spatial
    axes of sizes ins_sp and kernel ks (from output_shape, auto_pad or pads)."""
    strides = [int(v) for v in at.get("strides", [1] * nd)]
    dils = [int(v) for v in at.get("dilations", [1] * nd)]
    outpad = [int(p) for p in at.get("output_padding", [0] * nd)]
    for name, v, lo in (("strides", strides, 1), ("dilations", dils, 1), ("output_padding", outpad, 0)):
        b.need(len(v) == nd and all(d >= lo for d in v), f"{name} must be {nd} integers >= {lo}, got {v}")
    full = [strides[i] * (ins_sp[i] - 1) + outpad[i] + (ks[i] - 1) * dils[i] + 1 for i in range(nd)]
    auto = at.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if "output_shape" in at:
        oshape = [int(v) for v in at["output_shape"]][-nd:]
        total = [full[i] - oshape[i] for i in range(nd)]
        upper = auto == "SAME_UPPER"
        pb = [t // 2 if upper else t - t // 2 for t in total]
        pe = [t - p for t, p in zip(total, pb)]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [full[i] - ins_sp[i] * strides[i] for i in range(nd)]
        pb = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
        pe = [t - p for t, p in zip(total, pb)]
    else:
        pads = [int(p) for p in at.get("pads", [0] * (2 * nd))]
        b.need(len(pads) == 2 * nd, f"pads must have {2 * nd} values, got {pads}")
        pb, pe = pads[:nd], pads[nd:]
    return strides, dils, outpad, pb, pe


@op("ConvTranspose", const_inputs=(1,))
def _conv_transpose(b, node, ins, at):
    """A transposed convolution is a convolution of the zero-dilated input with the flipped kernel."""
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    nd = x.rank - 2
    b.need_value(w.is_const, "ConvTranspose weights must be known at load time (an initializer or constant)", w)
    if nd == 3:
        return _conv_transpose_3d(b, at, x, np.asarray(w.const, dtype=np.float32), bias)
    group = int(at.get("group", 1))
    xt, xs = _as_2d(b, x)
    W = np.asarray(w.const, dtype=np.float32)
    if nd == 1:
        W = W[:, :, None, :]
    C, Mg, kH, kW = W.shape
    strides, dils, outpad, pb, pe = _transpose_geometry(b, at, nd, list(x.shape[2:]), list(W.shape[4 - nd:]))
    if nd == 1:
        strides, dils, outpad, pb, pe = ([d0] + v for d0, v in ((1, strides), (1, dils), (0, outpad), (0, pb),
                                                                 (0, pe)))
    ks = [kH, kW]
    out = _conv_transpose_kernel(b, xt, xs, W, bias, group, strides, dils, outpad, pb, pe)
    if out is not None:
        y, oshape = out
        if nd == 1:
            oshape = (oshape[0], oshape[1], oshape[3])
            y = reshape(b, y, oshape)
        return [b.out(y, oshape, x.dtype)]
    t, shape = xt, xs
    for ax in (0, 1):
        t, shape = _dilate(b, t, shape, 2 + ax, strides[ax])
    Cg = C // group
    Wc = np.concatenate([np.transpose(W[g * Cg:(g + 1) * Cg], (1, 0, 2, 3)) for g in range(group)], axis=0)
    Wc = np.ascontiguousarray(Wc[:, :, ::-1, ::-1])  # (Mg * group, Cg, kH, kW)
    cpb = [dils[i] * (ks[i] - 1) - pb[i] for i in range(2)]
    cpe = [dils[i] * (ks[i] - 1) - pe[i] + outpad[i] for i in range(2)]
    y, oshape = conv2d(b, t, shape, Wc, Wc.shape, [1, 1], cpb, cpe, dils, group, bias)
    if nd == 1:
        oshape = (oshape[0], oshape[1], oshape[3])
        y = reshape(b, y, oshape)
    return [b.out(y, oshape, x.dtype)]


def _conv_transpose_kernel(b, x, shape, W, bias, group, strides, dils, outpad, pb, pe):
    """The 2-D ConvTranspose as one node of conv_transpose.c, which sums as onnxruntime's CPU provider
    (a float ConvTranspose between quantized ops then gives onnxruntime's integers): (tensor, shape), or
    None where it does not apply (not ggml's CPU backend, no kernels, f16 weights asked for)."""
    k = b.kernels
    if k is None or k.conv_transpose is None or (b.f16_weights and W.size >= 256):
        return None
    N, C, H, Wd = shape
    Cw, Mg, kH, kW = W.shape
    b.need(C == Cw and C % group == 0, f"ConvTranspose: {C} input channels, weights {list(W.shape)}, group {group}")
    outs = [strides[i] * (n - 1) + outpad[i] + (kk - 1) * dils[i] + 1 - pb[i] - pe[i]
            for i, (n, kk) in enumerate(((H, kH), (Wd, kW)))]
    b.need(all(o > 0 for o in outs), f"ConvTranspose: output size {outs}")
    Cg = C // group
    w = b.weight(np.ascontiguousarray(W).reshape(group, Cg, Mg * kH * kW))
    bt = None if bias is None else _conv_bias(b, bias, Mg * group)
    y = k.conv_transpose(b.ctx, cont(b, x), w, bt, (kH, kW), tuple(strides), tuple(dils), (pb[0], pb[1]),
                         tuple(outs), group, mlas_k_block(Mg * kH * kW, H * Wd, Cg))
    return b.kernel_node(y, "conv_transpose"), (N, Mg * group, outs[0], outs[1])


def mlas_k_block(rows: int, pixels: int, channels: int) -> int:
    """The input channels a block of onnxruntime's ConvTranspose product sums (MLAS's SGEMM K stride,
    sgemm.cpp's MlasSgemmOperation, for weights of rows x channels by an input of channels x pixels on
    one thread): 128, doubled each time its N stride (128, halved, not below 16) still covers the pixels
    twice, where the pixels are fewer than the channels and onnxruntime packs the weights transposed at
    load (neither rows nor channels 1; otherwise it reads them transposed, and MLAS keeps 128)."""
    sn, sk = 128, 128
    if pixels < channels and rows > 1 and channels > 1:
        while sn > 16 and sn // 2 >= pixels:
            sn, sk = sn // 2, sk * 2
    return sk


def _conv_transpose_3d(b, at, x, W, bias):
    """3-D ConvTranspose (group 1): the input zero-dilated by the strides and padded, its windows gathered
    by ggml_im2col_3d (ggml [W, H, D, N*C] in, one row of C*KD*KH*KW per output cell), times the flipped
    kernel as one matrix product."""
    b.need(int(at.get("group", 1)) == 1, "3-D ConvTranspose with group > 1 is not supported")
    N, C = x.shape[:2]
    b.need(W.ndim == 5 and W.shape[0] == C, f"weights {list(W.shape)} do not fit {C} input channels")
    M, ks = W.shape[1], list(W.shape[2:])
    strides, dils, outpad, pb, pe = _transpose_geometry(b, at, 3, list(x.shape[2:]), ks)
    shape = (N * C,) + tuple(x.shape[2:])
    t = reshape(b, b.tensor(x), shape)
    for ax in range(3):
        t, shape = _dilate(b, t, shape, 1 + ax, strides[ax])
    cpb = [dils[i] * (ks[i] - 1) - pb[i] for i in range(3)]
    cpe = [dils[i] * (ks[i] - 1) - pe[i] + outpad[i] for i in range(3)]
    for ax in range(3):  # negative amounts crop
        lo, hi = max(0, -cpb[ax]), shape[1 + ax] - max(0, -cpe[ax])
        b.need(hi > lo, "ConvTranspose: the pads remove the whole output")
        t, shape = slice_axis(b, t, shape, 1 + ax, lo, hi)
    t, shape = pad_zero(b, t, shape, [0] + [max(0, p) for p in cpb], [0] + [max(0, p) for p in cpe])
    outs = [shape[1 + i] - dils[i] * (ks[i] - 1) for i in range(3)]
    b.need(all(o > 0 for o in outs), f"ConvTranspose: output size {outs}")
    Wc = np.ascontiguousarray(np.transpose(W, (1, 0, 2, 3, 4))[:, :, ::-1, ::-1, ::-1])  # (M, C, kD, kH, kW)
    taps = b.weight(np.zeros((C, *ks), np.float32))  # im2col_3d reads its shape only (one output channel)
    cols = onnx_lib.ggml_im2col_3d(b.ctx, taps, cont(b, t), C, 1, 1, 1, 0, 0, 0, dils[2], dils[1], dils[0],
                              onnx_lib.GGML_TYPE_F32)  # ne [C*K, OW, OH, OD*N]
    S = int(np.prod(outs))
    K = C * int(np.prod(ks))
    y = onnx_lib.ggml_mul_mat(b.ctx, b.weight(Wc.reshape(M, K)), reshape(b, cols, (N * S, K)))  # ne [M, S*N]
    y = permute(b, reshape(b, y, (N, S, M)), (0, 2, 1))  # (N, M, S)
    if bias is not None:
        y = onnx_lib.ggml_add(b.ctx, y, reshape(b, b.tensor(bias), (1, M, 1)))
    oshape = (N, M) + tuple(outs)
    return [b.out(reshape(b, y, oshape), oshape, x.dtype)]


def conv_pool(b, node, ins, at, relu, pool_node, pool_at):
    """Conv (-> Relu) -> MaxPool (fusion.find_conv_epilogues) as one node of conv.c's pixel kernel, which
    pools the convolution's rows while they are in cache and never writes them (Kernels.conv2d_pool):
    where that kernel, on the padded input's phase planes, is the one the Conv gets (conv_kernel; a ResNet's
    stem) and the MaxPool is 2-D without dilations (any windows, strides, pads and ceil_mode). None
    otherwise: the caller then builds the Conv's node and the MaxPool's."""
    k = b.kernels
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    if k is None or k.conv2d_pool is None or x.rank != 4 or w.rank != 4 or not w.is_const or \
            bias is not None and bias.rank != 1:
        return None
    N, C, H, W = x.shape
    M, Cg, kH, kW = w.shape
    group = int(at.get("group", 1))
    if group < 1 or C != Cg * group or M % group or b.f16_weights and w.const.size >= 256:
        return None  # the Conv's builder says what is wrong; half-precision weights are ggml's products'
    strides = [int(s) for s in at.get("strides", [1, 1])]
    dils = [int(d) for d in at.get("dilations", [1, 1])]
    pb, pe = _conv_pads(b, at, [H, W], [kH, kW], strides, dils)
    OH, OW = _conv_out_hw((H, W), (kH, kW), strides, pb, pe, dils)
    if min(pb + pe) < 0 or OH < 1 or OW < 1:
        return None
    ks, pstrides, pdils, ppb, ppe, ceil = _pool_attrs(b, Val((N, M, OH, OW), x.dtype), pool_at)
    if any(d != 1 for d in pdils) or \
            not kernels.direct_fits(*kernels.direct_planes((OH, OW), (kH, kW), strides, dils, Cg)) or \
            _packed_kind(k, (OH, OW), w.shape, group, strides, pb, pe, dils) != "pixels" or PIXEL_VECTORS != 3:
        return None
    outs, _ = _pool_outs([OH, OW], ks, pstrides, ppb, ppe, ceil)
    wp = b.weight(k.pack_conv_pixels(np.asarray(w.const, dtype=np.float32), group, 3))  # conv_pixels_direct's
    bt = None if bias is None else _conv_bias(b, bias, M)
    y = k.conv2d_pool(b.ctx, cont(b, b.tensor(x)), wp, M, (kH, kW), tuple(strides), (pb[0], pb[1]), tuple(dils),
                      (OH, OW), group, bt, relu, tuple(ks), tuple(pstrides), (ppb[0], ppb[1]), tuple(outs))
    return [b.out(b.kernel_node(y, "conv2d_pool"), (N, M, *outs), x.dtype)]
