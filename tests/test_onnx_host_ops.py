"""NonMaxSuppression and RoiAlign: numpy host steps between ggml graphs (ggmlpy/onnx/ops_host.py).

Checked against onnx's reference implementation on random inputs, and as parts of a detection-style
model (graph -> NMS -> graph -> RoiAlign -> graph) against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy.onnx import OnnxError  # noqa: E402
from ggmlpy.onnx.ops_host import HOST_OPS  # noqa: E402


def random_boxes(rng, batches, n, flip=False):
    xy = rng.uniform(0, 10, (batches, n, 2))
    wh = rng.uniform(0.5, 4, (batches, n, 2))
    b = np.concatenate([xy, xy + wh], -1).astype(np.float32)
    return b[..., [2, 1, 0, 3]] if flip else b


@pytest.mark.parametrize("trial", range(12))
def test_nms_matches_reference(trial):
    rng = np.random.default_rng(trial)
    boxes = random_boxes(rng, 2, 30, flip=trial % 2 == 1)
    scores = rng.uniform(0, 1, (2, 3, 30)).astype(np.float32)
    scores[0, 0, :6] = 0.5  # ties: lower box index first
    feeds = {"b": boxes, "s": scores, "m": np.array([trial % 6], np.int64),
             "i": np.array([rng.uniform(0.1, 0.7)], np.float32), "t": np.array([0.25], np.float32)}
    cpb = int(trial % 3 == 0)
    node = helper.make_node("NonMaxSuppression", list(feeds), ["y"], center_point_box=cpb)
    want = ReferenceEvaluator(node).run(None, feeds)[0]
    got = HOST_OPS["NonMaxSuppression"](list(feeds.values()), {"center_point_box": cpb})[0]
    assert got.dtype == np.int64 and got.shape[1] == 3
    np.testing.assert_array_equal(got, want)


def test_nms_defaults():
    """No max_output_boxes_per_class: 0, so nothing is selected (ONNX's default; ggmlR takes all)."""
    boxes = random_boxes(np.random.default_rng(0), 1, 5)
    scores = np.ones((1, 1, 5), np.float32)
    assert HOST_OPS["NonMaxSuppression"]([boxes, scores], {})[0].shape == (0, 3)
    got = HOST_OPS["NonMaxSuppression"]([boxes, scores, np.array([10], np.int64)], {})[0]
    assert got.shape[0] >= 1 and (got[:, :2] == 0).all()  # iou_threshold 0: any overlap suppresses


@pytest.mark.parametrize("trial", range(12))
def test_roialign_matches_reference(trial):
    rng = np.random.default_rng(100 + trial)
    X = rng.normal(size=(2, 3, 9, 11)).astype(np.float32)
    r0 = rng.uniform(-3, 12, (5, 2))
    rois = np.concatenate([r0, r0 + rng.uniform(-1, 8, (5, 2))], 1).astype(np.float32)  # some degenerate
    bi = rng.integers(0, 2, 5).astype(np.int64)
    at = dict(output_height=3, output_width=4, sampling_ratio=trial % 3, spatial_scale=float(rng.uniform(0.5, 1.5)),
              mode=["avg", "max"][trial % 2],
              coordinate_transformation_mode=["half_pixel", "output_half_pixel"][trial % 4 // 2])
    want = ReferenceEvaluator(helper.make_node("RoiAlign", ["X", "r", "b"], ["y"], **at)).run(
        None, {"X": X, "r": rois, "b": bi})[0]
    got = HOST_OPS["RoiAlign"]([X, rois, bi], {k: v.encode() if isinstance(v, str) else v for k, v in at.items()})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_roialign_opset10_has_no_half_pixel_offset():
    """Before opset 16 there is no coordinate_transformation_mode: 'output_half_pixel' (no -0.5 shift)."""
    X = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    rois = np.array([[0, 0, 4, 4]], np.float32)
    at = {"output_height": 2, "output_width": 2, "sampling_ratio": 1}
    old = HOST_OPS["RoiAlign"]([X, rois, np.zeros(1, np.int64)], at, 10)[0]
    new = HOST_OPS["RoiAlign"]([X, rois, np.zeros(1, np.int64)], at, 16)[0]
    # bins of 2x2 sampled at their centres (1, 1), (1, 3)...; half_pixel samples at (0.5, 0.5)...
    np.testing.assert_allclose(old.reshape(-1), [5, 7, 13, 15])
    np.testing.assert_allclose(new.reshape(-1), [2.5, 4.5, 10.5, 12.5])


def detection_model(C=4, H=12, W=12, NB=20, K=6, score_threshold=0.6):
    """conv features and sigmoid scores (graph) -> NMS (host) -> gather the kept boxes (graph) ->
    RoiAlign (host) -> 1x1 conv and sigmoid: mask logits (graph). Outputs: selection and masks."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.normal(size=(C, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    w2 = numpy_helper.from_array(rng.normal(size=(2, C, 1, 1)).astype(np.float32), "w2")
    consts = [numpy_helper.from_array(np.array([K], np.int64), "mob"),
              numpy_helper.from_array(np.array([0.4], np.float32), "iou"),
              numpy_helper.from_array(np.array([score_threshold], np.float32), "st"),
              numpy_helper.from_array(np.array(0, np.int64), "zero"),
              numpy_helper.from_array(np.array(2, np.int64), "two"),
              numpy_helper.from_array(np.array([0], np.int64), "ax0")]
    nodes = [helper.make_node("Conv", ["image", "w"], ["feat"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["feat"], ["featr"]),
             helper.make_node("Sigmoid", ["logits"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "mob", "iou", "st"], ["sel"]),
             helper.make_node("Gather", ["sel", "two"], ["box_idx"], axis=1),
             helper.make_node("Gather", ["sel", "zero"], ["batch_idx"], axis=1),
             helper.make_node("Squeeze", ["boxes", "ax0"], ["boxes2"]),
             helper.make_node("Gather", ["boxes2", "box_idx"], ["rois"], axis=0),
             helper.make_node("RoiAlign", ["featr", "rois", "batch_idx"], ["pooled"],
                              output_height=3, output_width=3, sampling_ratio=2, spatial_scale=0.5),
             helper.make_node("Conv", ["pooled", "w2"], ["m"]),
             helper.make_node("Sigmoid", ["m"], ["masks"])]
    g = helper.make_graph(nodes, "detect", [helper.make_tensor_value_info("image", T.FLOAT, [1, 3, H, W]),
                                            helper.make_tensor_value_info("boxes", T.FLOAT, [1, NB, 4]),
                                            helper.make_tensor_value_info("logits", T.FLOAT, [1, 2, NB])],
                          [helper.make_tensor_value_info("sel", T.INT64, [None, 3]),
                           helper.make_tensor_value_info("masks", T.FLOAT, [None, 2, 3, 3])], [w, w2] + consts)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def detection_inputs(seed, NB=20):
    rng = np.random.default_rng(seed)
    return {"image": rng.normal(size=(1, 3, 12, 12)).astype(np.float32),
            "boxes": random_boxes(rng, 1, NB) * 2,  # image coordinates: spatial_scale 0.5 maps them to features
            "logits": rng.normal(size=(1, 2, NB)).astype(np.float32) * 2 + rng.uniform(-1.5, 1.5)}


def test_detection_pipeline_against_onnxruntime(device):
    ort = pytest.importorskip("onnxruntime")
    m = detection_model()
    model = ggmlpy.onnx_load(m, device=device)
    tol = {"rtol": 1e-4, "atol": 1e-5} if device == "cpu" else {"rtol": 1e-2, "atol": 5e-3}  # Vulkan: f16 sums
    s = ggmlpy.onnx_summary(model)
    assert s["host_ops"] == ["NonMaxSuppression", "RoiAlign"]
    assert s["outputs"] == {"sel": None, "masks": None}  # sizes known only after NMS has run
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    counts = set()
    for seed in range(6):
        feeds = detection_inputs(seed)
        got = ggmlpy.onnx_run(model, feeds)
        want = dict(zip(["sel", "masks"], sess.run(None, feeds)))
        np.testing.assert_array_equal(got["sel"], want["sel"])
        assert got["sel"].dtype == np.int64
        np.testing.assert_allclose(got["masks"], want["masks"], **tol)
        counts.add(len(got["sel"]))
    plan = next(iter(model._plans.values()))
    assert len(counts) > 1 and len(plan.next_plans) == len(counts)  # one graph per selected count, reused


def test_detection_pipeline_nothing_selected():
    """NMS keeps no box: ggml has no empty tensors, so the nodes after it run in numpy."""
    ort = pytest.importorskip("onnxruntime")
    m = detection_model(score_threshold=0.9999)
    model = ggmlpy.onnx_load(m, device="cpu")
    feeds = detection_inputs(0)
    got = ggmlpy.onnx_run(model, feeds)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert got["sel"].shape == (0, 3) and got["masks"].shape == want[1].shape == (0, 2, 3, 3)


def test_host_ops_fold_when_constant():
    boxes = numpy_helper.from_array(random_boxes(np.random.default_rng(1), 1, 6), "boxes")
    scores = numpy_helper.from_array(np.linspace(0.1, 0.9, 6, dtype=np.float32).reshape(1, 1, 6), "scores")
    mob = numpy_helper.from_array(np.array([2], np.int64), "mob")
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "mob"], ["sel"]),
             helper.make_node("Cast", ["sel"], ["self"], to=T.FLOAT),
             helper.make_node("Add", ["x", "self"], ["y"])]
    g = helper.make_graph(nodes, "c", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])], [boxes, scores, mob])
    model = ggmlpy.onnx_load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), device="cpu")
    plan = next(iter(model._plans.values()))
    assert not plan.deferred and plan.n_folded >= 1
    x = np.zeros((2, 3), np.float32)
    np.testing.assert_array_equal(ggmlpy.onnx_run(model, {"x": x})["y"], [[0, 0, 5], [0, 0, 4]])


def test_roialign_bad_batch_index_is_an_error():
    nodes = [helper.make_node("RoiAlign", ["X", "rois", "bi"], ["Y"], output_height=2, output_width=2)]
    g = helper.make_graph(nodes, "r", [helper.make_tensor_value_info("X", T.FLOAT, [1, 1, 4, 4]),
                                       helper.make_tensor_value_info("rois", T.FLOAT, [1, 4]),
                                       helper.make_tensor_value_info("bi", T.INT64, [1])],
                          [helper.make_tensor_value_info("Y", T.FLOAT, [1, 1, 2, 2])])
    model = ggmlpy.onnx_load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), device="cpu")
    feeds = {"X": np.ones((1, 1, 4, 4), np.float32), "rois": np.array([[0, 0, 2, 2]], np.float32)}
    assert ggmlpy.onnx_run(model, dict(feeds, bi=np.array([0])))["Y"].shape == (1, 1, 2, 2)
    with pytest.raises(OnnxError, match="batch_indices"):
        ggmlpy.onnx_run(model, dict(feeds, bi=np.array([1])))
