"""torchvision for the zoo's exports (tests/onnx_zoo.py) beside the CPU build of torch.

PyPI's torchvision wheels are CUDA builds: their compiled operators (`torchvision/_C.so`) do not load
beside PyTorch's CPU build, and the package then fails to import ('operator torchvision::nms does not
exist'). The exports need only two of those operators at trace time, `nms` and `roi_align` (the
detection models'), and the ONNX exporter turns both into ONNX's NonMaxSuppression and RoiAlign by
torchvision's own symbolic functions. So where the compiled operators do not load, this module
declares torchvision's operator schemas and gives `nms` and `roi_align` Python kernels (greedy
suppression; torchvision's own Python RoIAlign) before torchvision is imported.

Such a torchvision is kept off the environment's path, since a torchvision that fails to import breaks
every package that imports it when installed (transformers does): install it into a folder of its own
and name that folder in GGMLPY_ZOO_TORCHVISION,
    pip install --no-deps --target DIR torchvision==0.28.0   # the release built for torch 2.13
A torchvision that imports (a CPU build matching torch) is used as it is.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys

ENV = "GGMLPY_ZOO_TORCHVISION"

# torchvision 0.28's operator schemas (csrc/ops/*.cpp): its meta registrations need each declared.
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "_roi_align_backward(Tensor grad, Tensor rois, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "qroi_align(Tensor input, Tensor rois, float input_scale, int input_zero_point, float rois_scale, "
    "int rois_zero_point, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio, bool aligned) -> Tensor",
    "ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
    "int sampling_ratio) -> (Tensor, Tensor)",
    "_ps_roi_align_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, int sampling_ratio, SymInt batch_size, SymInt channels, "
    "SymInt height, SymInt width) -> Tensor",
    "roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) "
    "-> (Tensor, Tensor)",
    "_roi_pool_backward(Tensor grad, Tensor rois, Tensor argmax, float spatial_scale, SymInt pooled_height, "
    "SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, SymInt width) -> Tensor",
    "ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width) "
    "-> (Tensor, Tensor)",
    "_ps_roi_pool_backward(Tensor grad, Tensor rois, Tensor channel_mapping, float spatial_scale, "
    "SymInt pooled_height, SymInt pooled_width, SymInt batch_size, SymInt channels, SymInt height, "
    "SymInt width) -> Tensor",
    "deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias, SymInt stride_h, "
    "SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w, SymInt groups, "
    "SymInt offset_groups, bool use_mask) -> Tensor",
    "_deform_conv2d_backward(Tensor grad, Tensor input, Tensor weight, Tensor offset, Tensor mask, "
    "Tensor bias, SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, "
    "SymInt dilation_w, SymInt groups, SymInt offset_groups, bool use_mask) -> "
    "(Tensor, Tensor, Tensor, Tensor, Tensor)",
)

_loaded = None
_libraries = []  # the Library objects must live as long as the process for their registrations to stay


def _nms(dets, scores, iou_threshold):
    """Greedy non-maximum suppression: indices of the kept boxes, by decreasing score (torchvision's)."""
    import numpy as np
    import torch
    order = np.argsort(-scores.detach().numpy(), kind="stable")
    box = dets.detach().numpy().astype(np.float64)[order]
    area = (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])
    lo = np.maximum(box[:, None, :2], box[None, :, :2])
    hi = np.minimum(box[:, None, 2:], box[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=2)
    overlaps = inter / (area[:, None] + area[None, :] - inter) > iou_threshold
    suppressed = np.zeros(len(order), dtype=bool)
    keep = []
    for i in range(len(order)):
        if not suppressed[i]:
            keep.append(order[i])
            suppressed |= overlaps[i]
    return torch.tensor(np.array(keep, dtype=np.int64))


def _has_ops():
    return True


def _declare_operators(torch):
    lib = torch.library.Library("torchvision", "DEF")
    _libraries.append(lib)
    for schema in _SCHEMAS:
        lib.define(schema)

    def roi_align(*args):
        from torchvision.ops.roi_align import _roi_align
        return _roi_align(*args)
    lib.impl("nms", _nms, "CPU")
    lib.impl("roi_align", roi_align, "CPU")


def torchvision(torch):
    """The torchvision module, importing it (with the operators above where its own do not load); None
    where there is none."""
    global _loaded
    if _loaded is not None:
        return _loaded
    folder = os.environ.get(ENV)
    if folder and folder not in sys.path:
        sys.path.append(folder)
    try:
        spec = importlib.util.find_spec("torchvision")
    except ValueError:
        spec = None
    if spec is None:
        return None
    lib_dir = os.path.dirname(spec.origin)
    try:
        torch.ops.load_library(os.path.join(lib_dir, "_C.so"))
        native = True
    except (OSError, RuntimeError):
        native = False
    if not native:
        _declare_operators(torch)
    tv = importlib.import_module("torchvision")
    if not native:
        # torchvision's modules ask _has_ops() (bound at their import) before calling its operators
        for name, module in list(sys.modules.items()):
            if name.startswith("torchvision") and hasattr(module, "_has_ops"):
                module._has_ops = _has_ops
    _loaded = tv
    return tv
