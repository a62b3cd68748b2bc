"""Small versions of the ONNX Model Zoo's architectures (tests/onnx_zoo.py) exported by torch and
compared with onnxruntime. Those built from transformers or torchvision are skipped, with the
reason, where that library is not installed."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="exports the models with PyTorch: pip install torch==2.13.0 "
                                    "--index-url https://download.pytorch.org/whl/cpu")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

import ggmlpy  # noqa: E402
from onnx import numpy_helper  # noqa: E402
from onnx_zoo import QUANTIZED, ZOO, Unavailable, build, torch_outputs  # noqa: E402

# ops that move or pick a value's elements without computing new ones
_MOVES = {"Gather", "Reshape", "Slice", "Squeeze", "Unsqueeze", "Identity", "Flatten", "Transpose", "Expand"}


def quantization_steps(path) -> dict:
    """Each graph output's quantization step: the scale of the DequantizeLinear whose elements it
    picks (through _MOVES); outputs that are no dequantized value are left out."""
    model = onnx.load(path)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    steps = {}
    for out in model.graph.output:
        node = producer.get(out.name)
        while node is not None and node.op_type in _MOVES:
            node = producer.get(node.input[0])
        if node is not None and node.op_type == "DequantizeLinear" and np.size(inits.get(node.input[1], [])) == 1:
            steps[out.name] = float(inits[node.input[1]])
    return steps


_BUILT: dict = {}


def run_both(name, folder):
    """(path, onnxruntime's outputs, ggmlpy's outputs) of a zoo model, built and run once per session."""
    if name not in _BUILT:
        try:
            path, feeds = build(name, torch, str(folder))
        except Unavailable as e:
            _BUILT[name] = e
        else:
            so = ort.SessionOptions()
            if ZOO[name][1] == QUANTIZED:
                # the model as written: onnxruntime's graph optimizer quantizes the weights of a float op
                # between a DequantizeLinear and a QuantizeLinear (Mask R-CNN's ConvTranspose; its
                # WeightBiasQuantization), which moves its results by up to 2.7 steps of the output's
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
            got = ggmlpy.onnx_run(ggmlpy.onnx_load(path, device="cpu"), feeds)
            _BUILT[name] = (path, want, got)
    if isinstance(_BUILT[name], Unavailable):
        pytest.skip(f"{name}: {_BUILT[name]}")
    return _BUILT[name]


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_architecture_matches_onnxruntime(name, tmp_path_factory):
    path, want, got = run_both(name, tmp_path_factory.mktemp(name))
    if ZOO[name][1] == QUANTIZED:
        compare_quantized(got, want, quantization_steps(path), skip=MASKS)
        return
    rtol, atol = ZOO[name][1]
    reference = torch_outputs(path)
    for k, w in want.items():
        assert got[k].shape == w.shape, k
        # an output on which torch and onnxruntime themselves differ by more than the tolerance (a deep
        # network's float32 rounding) gets the tolerance scaled by that difference, and only that
        scale = 1.0
        if k in reference:
            scale = max(1.0, float(np.max(np.abs(reference[k] - w) / (atol + rtol * np.abs(w)))))
        np.testing.assert_allclose(got[k], w, rtol=rtol * scale, atol=atol * scale,
                                   err_msg=f"{k} (tolerance x{scale:.2f}: torch vs onnxruntime)")


MASKS = ("masks", "mask_logits")


def test_mask_rcnn_int8_masks_within_one_step(tmp_path_factory):
    """The masks too: the float ConvTranspose between the mask head's quantized convolutions sums as
    onnxruntime's does (conv_transpose.c), so the QuantizeLinear after it lands on onnxruntime's integers."""
    k = ggmlpy.kernels.get()
    if k is None or k.conv_transpose is None:
        pytest.skip("no conv_transpose.c kernel (GGMLPY_KERNELS=0 or no compiler): the mask head's ConvTranspose "
                    "is a convolution, summed in another order than onnxruntime's")
    path, want, got = run_both("mask_rcnn_int8", tmp_path_factory.mktemp("mask_rcnn_int8"))
    compare_quantized({k: got[k] for k in MASKS}, {k: want[k] for k in MASKS}, quantization_steps(path))


def compare_quantized(got, want, steps, skip=()):
    """An int8 model's outputs (but `skip`): integer outputs (labels) equal, dequantized ones within one
    quantization step of onnxruntime's."""
    for k, w in want.items():
        if k in skip:
            continue
        assert got[k].shape == w.shape, k
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(got[k], w, err_msg=k)
            continue
        assert k in steps, f"{k}: not a dequantized value"
        over = np.abs(got[k].astype(np.float64) - w) > steps[k] * (1 + 1e-6)
        assert not over.any(), f"{k}: {int(over.sum())} values more than one step from onnxruntime's"
