"""Operators computed on the host, in numpy, between ggml graphs: NonMaxSuppression, RoiAlign, NonZero.

Why not in the graph:
- NonMaxSuppression's output has as many rows as boxes survive: a size known only after the
  scores are computed, and ggml graphs have static shapes.
- NonZero's output has as many columns as its input has non-zero elements.
- RoiAlign samples its input at positions computed from data (the ROIs), with a number of samples
  per bin that depends on each ROI's size (sampling_ratio=0). ggml has no kernel for it, and the
  custom-op entry points (ggml_custom_4d, ggml_map_custom*) are not among the bound declarations.

How they run (see plan.py, `OnnxShapePlan`, and model.py, `OnnxModel.run`): a node whose input is still unknown when
the graph is built (it comes from the graph) is *deferred*, together with everything that depends on
it. The model becomes a chain of stages: ggml graph -> host step (these functions, on the values
read back) -> ggml graph of the deferred nodes (built for the shapes the host step produced, kept
for the next call with the same shapes) -> ... A model without these operators is one graph, as
before. With all inputs known at load time, they are folded at load like any other node.

Each function takes numpy inputs (None for an omitted optional input), the node's attributes and
the model's opset, and returns the list of outputs, matching onnx's reference implementation (onnx.reference.ops).
"""
from __future__ import annotations

import numpy as np
from .graph import OnnxError

HOST_OPS: dict = {}


def host_op(name):
    def deco(fn):
        HOST_OPS[name] = fn
        return fn
    return deco


def _scalar(v, default, kind):
    if v is None or np.size(v) == 0:
        return default
    return kind(np.asarray(v).reshape(-1)[0])


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """Boxes as (y_min, x_min, y_max, x_max) in float32, whatever their corner order or format."""
    b = boxes.astype(np.float32, copy=False)
    if center_point_box:  # (x_center, y_center, width, height)
        hw, hh = b[:, 2] / np.float32(2), b[:, 3] / np.float32(2)
        return np.stack([b[:, 1] - hh, b[:, 0] - hw, b[:, 1] + hh, b[:, 0] + hw], axis=1)
    # (y1, x1, y2, x2): either corner may come first
    return np.stack([np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3]),
                     np.maximum(b[:, 0], b[:, 2]), np.maximum(b[:, 1], b[:, 3])], axis=1)


def _suppressed(box: np.ndarray, others: np.ndarray, iou_threshold: np.float32) -> np.ndarray:
    """Which of `others` overlap `box` with an intersection over union above the threshold."""
    ih = np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0])
    iw = np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1])
    inter = ih * iw
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    ok = (ih > 0) & (iw > 0) & (inter > 0) & (area > 0) & (areas > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / np.where(union > 0, union, np.float32(1))
    return ok & (iou > iou_threshold)


@host_op("NonMaxSuppression")
def non_max_suppression(ins, at, opset: int = 22):
    """Greedy NMS per (batch, class): highest score first (ties: lower box index first); a box is
    dropped when its IoU with an already selected box exceeds iou_threshold. Output int64 rows
    (batch, class, box) in that order, at most max_output_boxes_per_class per class (default 0: none)."""
    boxes, scores = ins[0], ins[1]
    get = (lambda i: ins[i] if len(ins) > i else None)
    max_out = max(_scalar(get(2), 0, int), 0)
    iou_thr = np.float32(_scalar(get(3), 0.0, float))
    score_thr = get(4)
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise OnnxError(f"NonMaxSuppression: boxes must have shape [batches, boxes, 4], got {list(boxes.shape)}")
    if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise OnnxError(f"NonMaxSuppression: scores must have shape [{boxes.shape[0]}, classes, {boxes.shape[1]}], "
                        f"got {list(scores.shape)}")
    cpb = int(at.get("center_point_box", 0))
    scores = scores.astype(np.float32, copy=False)
    rows = []
    for n in range(boxes.shape[0]):
        corners = _corners(boxes[n], cpb)
        for c in range(scores.shape[1]):
            s = scores[n, c]
            cand = np.arange(s.size)
            if score_thr is not None and np.size(score_thr):
                cand = cand[s > np.float32(_scalar(score_thr, 0.0, float))]
            order = cand[np.argsort(-s[cand], kind="stable")]  # stable: equal scores keep index order
            kept = 0
            while order.size and kept < max_out:
                i = order[0]
                rows.append((n, c, i))
                kept += 1
                rest = order[1:]
                order = rest[~_suppressed(corners[i], corners[rest], iou_thr)]
    return [np.array(rows, dtype=np.int64).reshape(-1, 3)]


@host_op("RoiAlign")
def roi_align(ins, at, opset: int = 22):
    """RoiAlign (avg or max) of X [N, C, H, W] over rois [R, 4] = (x1, y1, x2, y2), one batch index
    per ROI: output [R, C, output_height, output_width]. Bilinear samples as in ONNX's reference:
    sampling_ratio per bin (0: ceil(roi size / output size)), samples outside [-1, size] count as
    zero; 'max' takes, per sample, the largest of the four weighted corner values (ONNX's definition).
    Computed in float32 in onnxruntime's order of operations, so that a quantized model's features,
    rounded to integers after this op, round as onnxruntime's do."""
    X, rois, bidx = ins[0], ins[1], ins[2]
    if X.ndim != 4:
        raise OnnxError(f"RoiAlign: X must be 4-D [N, C, H, W], got shape {list(X.shape)}")
    if rois.ndim != 2 or rois.shape[1] != 4:
        raise OnnxError(f"RoiAlign: rois must have shape [num_rois, 4], got {list(rois.shape)}")
    bidx = np.asarray(bidx).reshape(-1).astype(np.int64)
    if bidx.size != rois.shape[0]:
        raise OnnxError(f"RoiAlign: {rois.shape[0]} rois but {bidx.size} batch indices")
    N, C, H, W = X.shape
    if bidx.size and (bidx.min() < 0 or bidx.max() >= N):
        raise OnnxError(f"RoiAlign: batch_indices must lie in [0, {N}), got {bidx.min()}..{bidx.max()}")
    oh, ow = int(at.get("output_height", 1)), int(at.get("output_width", 1))
    sr = int(at.get("sampling_ratio", 0))
    scale = float(at.get("spatial_scale", 1.0))
    mode = at.get("mode", b"avg")
    mode = (mode.decode() if isinstance(mode, bytes) else str(mode)).lower()
    ctm = at.get("coordinate_transformation_mode", b"half_pixel" if opset >= 16 else b"output_half_pixel")
    half_pixel = (ctm.decode() if isinstance(ctm, bytes) else str(ctm)).lower() == "half_pixel"
    if mode not in ("avg", "max"):
        raise OnnxError(f"RoiAlign: mode must be 'avg' or 'max', got '{mode}'")
    Xf = X.astype(np.float32, copy=False)
    Y = np.empty((rois.shape[0], C, oh, ow), dtype=np.float32)
    f32 = np.float32
    off, sc = f32(0.5 if half_pixel else 0.0), f32(scale)
    for r in range(rois.shape[0]):
        x1, y1, x2, y2 = (f32(v) * sc - off for v in rois[r].astype(np.float32))
        rw, rh = x2 - x1, y2 - y1
        if not half_pixel:
            rw, rh = max(rw, f32(1.0)), max(rh, f32(1.0))
        bh, bw = rh / f32(oh), rw / f32(ow)
        gh = sr if sr > 0 else int(np.ceil(rh / f32(oh)))
        gw = sr if sr > 0 else int(np.ceil(rw / f32(ow)))
        count = max(gh * gw, 1)
        if gh <= 0 or gw <= 0:  # an empty grid: no samples (the reference leaves zeros / its first value)
            Y[r] = 0.0
            continue
        # onnxruntime's positions: start + bin * size + (i + 0.5) * size / grid, in float32 in this order
        ys = (y1 + np.arange(oh, dtype=f32)[:, None] * bh) + (np.arange(gh, dtype=f32)[None, :] + f32(0.5)) * bh / f32(gh)
        xs = (x1 + np.arange(ow, dtype=f32)[:, None] * bw) + (np.arange(gw, dtype=f32)[None, :] + f32(0.5)) * bw / f32(gw)
        ylo, yhi, hy, ly, yok = _axis_weights(ys, H)
        xlo, xhi, hx, lx, xok = _axis_weights(xs, W)
        img = Xf[bidx[r]]  # [C, H, W]
        ok = (yok[:, :, None, None] & xok[None, None, :, :])  # [oh, gh, ow, gw]
        parts = []
        for yi, wy in ((ylo, hy), (yhi, ly)):
            for xi, wx in ((xlo, hx), (xhi, lx)):
                w = np.where(ok, wy[:, :, None, None] * wx[None, None, :, :], f32(0.0))
                parts.append(w * img[:, yi[:, :, None, None], xi[None, None, :, :]])
        if mode == "avg":  # w1 v1 + w2 v2 + w3 v3 + w4 v4, the samples added one by one (iy, then ix)
            v = ((parts[0] + parts[1]) + parts[2]) + parts[3]  # [C, oh, gh, ow, gw]
            v = v.transpose(0, 1, 3, 2, 4).reshape(C, oh, ow, gh * gw)
            Y[r] = np.cumsum(v, axis=-1, dtype=f32)[..., -1] / f32(count)
        else:
            Y[r] = np.maximum.reduce(parts).max(axis=(2, 4))
    return [Y if X.dtype == np.float32 else Y.astype(X.dtype if X.dtype.kind == "f" else np.float32)]


def _axis_weights(pos: np.ndarray, size: int):
    """Bilinear indices and weights (1 - frac, frac) along one axis, as ONNX's reference and
    onnxruntime compute them, in float32: positions below -1 or above `size` are invalid; the rest
    are clamped into [0, size - 1]."""
    valid = (pos >= -1.0) & (pos <= size)
    p = np.maximum(pos, np.float32(0.0))
    lo = np.floor(p).astype(np.int64)
    at_edge = lo >= size - 1
    lo = np.where(at_edge, size - 1, lo)
    hi = np.where(at_edge, size - 1, lo + 1)
    p = np.where(at_edge, lo.astype(np.float32), p)
    frac = p - lo.astype(np.float32)
    return lo, hi, np.float32(1.0) - frac, frac, valid



@host_op("NonZero")
def nonzero(ins, attrs, opset):
    """The indices of the non-zero elements, one row per axis (a scalar counts as one element)."""
    x = np.asarray(ins[0])
    return [np.array(np.nonzero(x.reshape(1) if x.ndim == 0 else x), dtype=np.int64).reshape(max(x.ndim, 1), -1)]
