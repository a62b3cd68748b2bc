"""Port of ggmlR tests/testthat/test-onnx-chain-roialign-nms.R (RoiAlign and NonMaxSuppression chains).

R's expectations are kept (lengths, finiteness, ranges); each test also checks the values, which R's
file does not: against onnxruntime, and by hand for the first. The models declare opset 13 as R's
helper does, so RoiAlign has opset 10's sampling (no half-pixel shift; onnx's reference evaluator
applies opset 16's default shift whatever the opset, so it is no judge here)."""
import numpy as np
import pytest

pytest.importorskip("onnx")

from .conftest import expect_equal  # noqa: E402
from .onnx_helpers import T, helper, init, model, run_onnx, vi  # noqa: E402


def reference(m, feeds):
    ort = pytest.importorskip("onnxruntime")
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in m.graph.input}
    feeds = {k: np.asarray(v, dtype=np.float32).reshape(shapes[k]) for k, v in feeds.items()}
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, feeds)[0], dtype=np.float64).reshape(-1)


def roialign_model(x_dims, rois, out_dims, out_hw, sampling_ratio, spatial_scale, then_sigmoid=False):
    n = len(rois) // 4
    roi_out = "roi_out" if then_sigmoid else "Y"
    nodes = [helper.make_node("RoiAlign", ["X", "rois", "bi"], [roi_out], output_height=out_hw,
                              output_width=out_hw, sampling_ratio=sampling_ratio, spatial_scale=spatial_scale,
                              mode="avg")]
    if then_sigmoid:
        nodes.append(helper.make_node("Sigmoid", ["roi_out"], ["Y"]))
    return model(nodes, [vi("X", x_dims), vi("rois", (n, 4)), vi("bi", (n,), T.INT64)], [vi("Y", out_dims)],
                 [init("rois", (n, 4), rois), init("bi", (n,), [0] * n, T.INT64)])


def test_chain_roialign_single_roi_full_coverage():
    m = roialign_model((1, 1, 4, 4), [0.0, 0.0, 4.0, 4.0], (1, 1, 2, 2), 2, 2, 1.0)
    x = np.arange(1, 17, dtype=float)
    r = run_onnx(m, {"X": x})
    assert len(r) == 4  # 1*1*2*2
    assert np.isfinite(r).all()
    assert (r > 0).all()  # each 2x2 output bin averages a quadrant
    # X = 1 + 4y + x is linear: each bin is X at its mean sample, samples past the last row/column
    # clamped to it (bin (0, 1) samples x = 2.5 and 3.5 -> 3: mean x 2.75)
    expect_equal(r, [6, 7.75, 13, 14.75], rtol=1e-6)


def test_chain_roialign_2_rois_with_spatial_scale_0_5():
    m = roialign_model((1, 2, 4, 4), [0, 0, 8, 8, 0, 0, 4, 4], (2, 2, 2, 2), 2, 1, 0.5)
    x = np.arange(1, 33, dtype=float)
    r = run_onnx(m, {"X": x})
    assert len(r) == 16  # 2*2*2*2
    assert np.isfinite(r).all()
    expect_equal(r, reference(m, {"X": x}), rtol=1e-5)


def test_chain_nms_basic_box_filtering():
    nms = helper.make_node("NonMaxSuppression", ["boxes", "scores", "mob", "iou"], ["Y"], center_point_box=0)
    m = model([nms], [vi("boxes", (1, 4, 4)), vi("scores", (1, 1, 4)), vi("mob", (1,), T.INT64), vi("iou", (1,))],
              [vi("Y", (-1, 3), T.INT64)], [init("mob", (1,), [2], T.INT64), init("iou", (1,), [0.5])])
    # boxes 0 and 1 overlap heavily, so do 2 and 3
    boxes = [0, 0, 10, 10, 0, 0, 9, 9, 20, 20, 30, 30, 20, 20, 29, 29]
    scores = [0.9, 0.8, 0.7, 0.6]
    r = run_onnx(m, {"boxes": boxes, "scores": scores})
    assert len(r) >= 3  # at least one selection of 3 columns
    expect_equal(r, [0, 0, 0, 0, 0, 2])  # box 0 (highest score) and box 2 (no overlap with 0)


def test_chain_roialign_sigmoid_roialign_to_sigmoid_mask_head():
    m = roialign_model((1, 1, 8, 8), [0, 0, 8, 8], (1, 1, 4, 4), 4, 2, 1.0, then_sigmoid=True)
    x = np.random.default_rng(42).standard_normal(64)  # R: rnorm(64)
    r = run_onnx(m, {"X": x})
    assert len(r) == 16  # 1*1*4*4
    assert ((r >= 0) & (r <= 1)).all()  # sigmoid output
    expect_equal(r, reference(m, {"X": x}), rtol=1e-5, atol=1e-6)
