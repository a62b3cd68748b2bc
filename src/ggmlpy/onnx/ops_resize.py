"""Resize and Upsample as separable per-axis linear maps.

Every ONNX interpolation (nearest, linear, cubic; each coordinate transform) is,
along one axis, a constant matrix M (out x in): output = M @ input along that
axis. M is computed in numpy from ONNX's formulas at load time and applied with
one ggml_mul_mat per resized axis, so every mode and coordinate transform is
exact, with no special kernel. tf_crop_and_resize's extrapolation value is added
with a constant mask.
"""
from __future__ import annotations

import numpy as np

from .graph import Val
from .layout import permute, reshape
from .op_table import cval, op
from .onnx_lib import onnx_lib


def _s(v, default):
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else v


def source_coords(mode, O, L, scale, roi=(0.0, 1.0)):
    i = np.arange(O, dtype=np.float64)
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adj = O / (scale * L)
        center = L / 2.0
        return center * (1 - adj) + (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if O > 1 else np.zeros(O)
    if mode == "align_corners":  # ONNX divides by the unrounded output length, scale * L
        return i * (L - 1) / (scale * L - 1) if O > 1 else np.zeros(O)
    if mode == "asymmetric":
        return i / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if O > 1:
            return start * (L - 1) + i * (end - start) * (L - 1) / (O - 1)
        return np.full(O, 0.5 * (start + end) * (L - 1))
    raise ValueError(f"coordinate_transformation_mode '{mode}'")


def _cubic_weights(t, a):
    t = np.asarray(t)
    return np.stack([((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
                     ((a + 2) * t - (a + 3)) * t * t + 1,
                     ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
                     ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a], axis=-1)


def _cubic_kernel(d, a):
    d = np.abs(d)
    return np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                    np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))


def _antialiased(M, x, L, scale, mode, a, exclude_outside):
    """Rows of M for antialias=1: when downsampling (scale < 1) the linear or cubic kernel is stretched
    by 1/scale, so each output averages every input cell under it; weights normalised to sum 1. The taps
    are the 2n cells nearest each source coordinate (the left ones on a tie), as ONNX's reference picks."""
    s = min(scale, 1.0)
    start = int(np.floor((-1.0 if mode == "linear" else -2.0) / s)) + 1
    k = np.arange(start, 2 - start, dtype=np.float64)  # tap offsets from the cell left of x
    x0 = np.floor(x)
    exact = x == x0
    ratio = np.where(exact, 1.0, x - x0)  # an exact coordinate counts as the right end of its left cell
    base = np.where(exact, x0 - 1, x0)
    d = (k[None, :] - ratio[:, None]) * s
    w = np.clip(1 - np.abs(d), 0, 1) if mode == "linear" else _cubic_kernel(d, a)
    w = w / w.sum(axis=1, keepdims=True)
    js = base[:, None] + k[None, :]
    if exclude_outside:
        w = np.where((js >= 0) & (js <= L - 1), w, 0.0)
        tot = w.sum(axis=1, keepdims=True)
        w = w / np.where(tot == 0, 1.0, tot)
    js = np.clip(js, 0, L - 1).astype(np.int64)
    rows = np.repeat(np.arange(len(x)), len(k))
    np.add.at(M, (rows, js.reshape(-1)), w.reshape(-1))


def axis_matrix(L, O, scale, at, roi=(0.0, 1.0)):
    """(M, inside): M is (O, L); inside marks outputs within the input (tf_crop_and_resize)."""
    mode = _s(at.get("mode"), "nearest")
    ctm = _s(at.get("coordinate_transformation_mode"), "half_pixel")
    x = source_coords(ctm, O, L, scale, roi)
    M = np.zeros((O, L), dtype=np.float64)
    rows = np.arange(O)
    inside = np.ones(O, dtype=bool)
    if ctm == "tf_crop_and_resize":
        inside = (x >= 0) & (x <= L - 1)
    if mode in ("linear", "cubic") and int(at.get("antialias", 0)):
        _antialiased(M, x, L, scale, mode, float(at.get("cubic_coeff_a", -0.75)), int(at.get("exclude_outside", 0)))
    elif mode == "nearest":
        nm = _s(at.get("nearest_mode"), "round_prefer_floor")
        idx = {"round_prefer_floor": np.ceil(x - 0.5), "round_prefer_ceil": np.floor(x + 0.5),
               "floor": np.floor(x), "ceil": np.ceil(x)}[nm]
        idx = np.clip(idx, 0, L - 1).astype(np.int64)
        M[rows, idx] = 1.0
    elif mode == "linear":
        x0 = np.floor(x)
        t = x - x0
        for off, w in ((0, 1 - t), (1, t)):
            j = np.clip(x0 + off, 0, L - 1).astype(np.int64)
            np.add.at(M, (rows, j), w)
    elif mode == "cubic":
        a = float(at.get("cubic_coeff_a", -0.75))
        x0 = np.floor(x)
        w = _cubic_weights(x - x0, a)
        js = np.stack([x0 - 1, x0, x0 + 1, x0 + 2], axis=-1)
        if int(at.get("exclude_outside", 0)):
            w = np.where((js >= 0) & (js <= L - 1), w, 0.0)
            w = w / w.sum(axis=-1, keepdims=True)
        js = np.clip(js, 0, L - 1).astype(np.int64)
        for k in range(4):
            np.add.at(M, (rows, js[:, k]), w[:, k])
    else:
        raise ValueError(f"mode '{mode}'")
    M[~inside] = 0.0
    return M, inside


def apply_axis(b, t, shape, axis, M):
    """Multiply along one ONNX axis by the constant M (out x in)."""
    r = len(shape)
    perm = [k for k in range(r) if k != axis] + [axis]
    x = permute(b, t, perm)
    moved = tuple(shape[k] for k in perm)
    rest = int(np.prod(moved[:-1], dtype=np.int64))
    x = reshape(b, x, (rest, shape[axis]))
    y = onnx_lib.ggml_mul_mat(b.ctx, b.weight(M.astype(np.float32)), x)  # ne [O, rest]
    O = M.shape[0]
    y = reshape(b, y, moved[:-1] + (O,))
    out_shape = tuple(O if k == axis else d for k, d in enumerate(shape))
    return permute(b, y, list(np.argsort(perm))), out_shape


def _resize(b, x, scales, sizes, at, roi=None, axes=None):
    r = x.rank
    aa = int(at.get("antialias", 0))
    b.need(aa in (0, 1), f"antialias must be 0 or 1, got {aa}")
    axes = list(range(r)) if axes is None else [a + r if a < 0 else a for a in axes]
    outs = list(x.shape)
    sc = [1.0] * r
    if sizes is not None:
        sizes = [int(s) for s in sizes]
        policy = _s(at.get("keep_aspect_ratio_policy"), "stretch")
        if policy == "stretch":
            for a, s in zip(axes, sizes):
                outs[a], sc[a] = s, s / x.shape[a]
        else:
            ratios = [s / x.shape[a] for a, s in zip(axes, sizes)]
            k = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                outs[a] = int(np.floor(k * x.shape[a] + 0.5))
                sc[a] = k
    else:
        for a, s in zip(axes, scales):
            sc[a] = float(s)
            outs[a] = int(np.floor(x.shape[a] * float(s)))
    rois = {}
    if roi is not None and len(roi):
        roi = [float(v) for v in roi]
        n = len(roi) // 2
        for i, a in enumerate(axes if n == len(axes) else range(r)):
            rois[a] = (roi[i], roi[n + i])
    t, shape = b.tensor(x), x.shape
    inside_all = None
    for a in range(r):
        if outs[a] == x.shape[a] and sc[a] == 1.0 and a not in rois:
            continue
        try:
            M, inside = axis_matrix(x.shape[a], outs[a], sc[a], at, rois.get(a, (0.0, 1.0)))
        except ValueError as e:
            raise b.fail(str(e)) from None
        if M.shape[0] == M.shape[1] and np.array_equal(M, np.eye(M.shape[0])) and inside.all():
            continue
        t, shape = apply_axis(b, t, shape, a, M)
        if not inside.all():
            m = inside.reshape([-1 if k == a else 1 for k in range(r)])
            inside_all = m if inside_all is None else inside_all & m
    if inside_all is not None:
        ev = float(at.get("extrapolation_value", 0.0))
        if ev != 0.0:
            mask = np.broadcast_to(np.where(inside_all, 0.0, ev), tuple(outs)).astype(np.float32)
            t = onnx_lib.ggml_add(b.ctx, t, b.weight(np.ascontiguousarray(mask)))
    if tuple(shape) == tuple(x.shape) and t is b.tensor(x):
        return x
    return b.out(t, tuple(outs), x.dtype)


@op("Resize", const_inputs=(1, 2, 3))
def _resize_op(b, node, ins, at):
    x = ins[0]
    if b.opset < 11:  # Resize-10: (X, scales), Upsample's coordinates
        at = dict(at)
        at.setdefault("coordinate_transformation_mode", "asymmetric")
        at.setdefault("nearest_mode", "floor")
        return [_resize(b, x, [float(s) for s in cval(b, ins[1], "scales")], None, at)]
    roi = cval(b, ins[1], "roi") if len(ins) > 1 and ins[1] is not None else None
    scales = cval(b, ins[2], "scales") if len(ins) > 2 and ins[2] is not None else None
    sizes = cval(b, ins[3], "sizes") if len(ins) > 3 and ins[3] is not None else None
    if scales is not None and scales.size == 0:
        scales = None
    b.need(scales is not None or sizes is not None, "Resize needs scales or sizes")
    axes = [int(a) for a in at["axes"]] if "axes" in at else None
    return [_resize(b, x, None if scales is None else scales.reshape(-1), None if sizes is None else sizes.reshape(-1),
                    at, None if roi is None else roi.reshape(-1), axes)]


@op("Upsample", const_inputs=(1,))
def _upsample(b, node, ins, at):
    x = ins[0]
    scales = cval(b, ins[1], "scales") if len(ins) > 1 else np.asarray(at["scales"])
    at = dict(at)
    mode = _s(at.get("mode"), "nearest")
    at["mode"] = "linear" if mode in ("linear", "bilinear") else mode
    at["coordinate_transformation_mode"] = "asymmetric"
    at["nearest_mode"] = "floor"
    return [_resize(b, x, [float(s) for s in np.asarray(scales).reshape(-1)], None, at)]


__all__ = ["axis_matrix", "apply_axis", "Val"]
