"""onnx_load / onnx_run / onnx_summary / onnx_inputs: API, reuse of built graphs, and clear errors."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

import ggmlpy  # noqa: E402
import ggmlpy.onnx as go  # noqa: E402


def mlp_model(batch=2):
    rng = np.random.default_rng(0)
    W = rng.standard_normal((4, 3)).astype(np.float32)
    B = rng.standard_normal(3).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "B"], ["z"], name="bias"),
             helper.make_node("Relu", ["z"], ["y"], name="act")]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", T.FLOAT, [batch, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [batch, 3])],
                          [onnx.numpy_helper.from_array(W, "W"), onnx.numpy_helper.from_array(B, "B")])
    m = helper.make_model(g, producer_name="ggmlpy-tests", opset_imports=[helper.make_opsetid("", 17)])
    return m, W, B


@pytest.fixture
def tiny(tmp_path):
    m, W, B = mlp_model()
    p = tmp_path / "tiny.onnx"
    onnx.save(m, str(p))
    return str(p), W, B


def test_load_run_summary(tiny):
    path, W, B = tiny
    model = ggmlpy.onnx_load(path, device="cpu")
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    out = ggmlpy.onnx_run(model, {"x": x})
    np.testing.assert_allclose(out["y"], np.maximum(x @ W + B, 0), rtol=1e-5, atol=1e-6)
    out2 = ggmlpy.onnx_run(model, [x])  # a list in input order
    from ggmlpy.core.device import get_backend
    from ggmlpy.core.registry import is_software_device
    try:  # the default device: a hardware GPU when there is one (a software Vulkan device is none), else the CPU
        gpu = get_backend("gpu").device_name
        expected = "CPU" if is_software_device(gpu) else gpu
    except ggmlpy.DeviceError:
        expected = "CPU"
    assert ggmlpy.onnx_load(path).device == expected
    np.testing.assert_array_equal(out["y"], out2["y"])
    assert len(model._plans) == 1
    s = ggmlpy.onnx_summary(model)
    assert s["opset_version"] == 17 and s["producer"] == "ggmlpy-tests" and s["graph_name"] == "tiny"
    assert s["n_nodes"] == 3 and s["n_initializers"] == 2
    assert s["ops"] == ["MatMul", "Add", "Relu"] and s["op_counts"] == {"MatMul": 1, "Add": 1, "Relu": 1}
    assert s["outputs"] == {"y": [2, 3]}
    assert ggmlpy.onnx_inputs(model) == {"x": [2, 4]}


def test_errors_name_the_problem(tiny, tmp_path):
    path, _, _ = tiny
    with pytest.raises(FileNotFoundError):
        go.onnx_load(tmp_path / "nope.onnx")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(go.OnnxError, match="empty"):
        go.onnx_load(empty)
    data = open(path, "rb").read()
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(data[: len(data) // 2])
    with pytest.raises(go.OnnxError, match="trunc.onnx"):
        go.onnx_load(trunc)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    with pytest.raises(go.OnnxError, match="junk.onnx"):
        go.onnx_load(junk)
    with pytest.raises(ValueError, match="dtype"):
        go.onnx_load(path, dtype="int8")


def test_missing_initializer(tmp_path):
    m, _, _ = mlp_model()
    del m.graph.initializer[1]  # B
    p = tmp_path / "noinit.onnx"
    onnx.save(m, str(p))
    with pytest.raises(go.OnnxError, match="'B'"):
        go.onnx_load(p, device="cpu")


def test_unsupported_operator_named_before_running(tmp_path):
    m, _, _ = mlp_model()
    m.graph.node[2].op_type = "Det"
    p = tmp_path / "det.onnx"
    onnx.save(m, str(p))
    with pytest.raises(go.OnnxError, match="unsupported ONNX operator 'Det' at node 'act'"):
        go.onnx_load(p, device="cpu")


def test_run_input_checks(tiny):
    path, _, _ = tiny
    model = go.onnx_load(path, device="cpu")
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(go.OnnxError, match=r"input 'x' has shape \[3, 4\], the model expects \[2, 4\]"):
        go.onnx_run(model, {"x": np.zeros((3, 4), np.float32)})
    with pytest.raises(go.OnnxError, match="unknown input"):
        go.onnx_run(model, {"x": x, "z": x})
    with pytest.raises(go.OnnxError, match="missing input"):
        go.onnx_run(model, {})
    with pytest.raises(go.OnnxError, match="numeric"):
        go.onnx_run(model, {"x": np.array([["a"] * 4] * 2)})
    with pytest.raises(TypeError):
        go.onnx_run("model", {"x": x})


def test_dynamic_dims_error_and_input_shapes(tmp_path):
    m, W, B = mlp_model()
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "batch"
    p = tmp_path / "dyn.onnx"
    onnx.save(m, str(p))
    with pytest.raises(go.OnnxError, match=r"Input 'x' has dynamic shape \[\?x4\]\. Specify fixed shape via "
                                           r"input_shapes"):
        go.onnx_load(p, device="cpu")
    with pytest.raises(go.OnnxError, match=r"declares \[\?, 4\]"):
        go.onnx_load(p, device="cpu", input_shapes={"x": (2, 5)})
    with pytest.warns(UserWarning, match="unknown input 'q'"):
        model = go.onnx_load(p, device="cpu", input_shapes={"x": (3, 4), "q": (1,)})
    x = np.ones((3, 4), np.float32)
    np.testing.assert_allclose(go.onnx_run(model, {"x": x})["y"], np.maximum(x @ W + B, 0), rtol=1e-5)


def test_gather_indices_checked_at_run(tmp_path):
    E = np.arange(12, dtype=np.float32).reshape(4, 3)
    g = helper.make_graph([helper.make_node("Gather", ["E", "ids"], ["y"])], "emb",
                          [helper.make_tensor_value_info("ids", T.INT64, [2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])],
                          [onnx.numpy_helper.from_array(E, "E")])
    model = go.onnx_load(helper.make_model(g), device="cpu")
    np.testing.assert_array_equal(go.onnx_run(model, {"ids": np.array([3, -4])})["y"], E[[3, 0]])
    np.testing.assert_array_equal(go.onnx_run(model, {"ids": np.array([2, 1])})["y"], E[[2, 1]])
    with pytest.raises(go.OnnxError, match=r"outside \[-4, 4\)"):
        go.onnx_run(model, {"ids": np.array([0, 4])})


def test_constant_subgraph_is_folded():
    """Shape -> Gather -> Concat -> Reshape, as exporters write it: folded at load, one ggml op left."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Constant", [], ["i0"], value=helper.make_tensor("i0", T.INT64, [1], [0])),
             helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
             helper.make_node("Constant", [], ["m1"], value=helper.make_tensor("m1", T.INT64, [1], [-1])),
             helper.make_node("Concat", ["n", "m1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Sigmoid", ["r"], ["y"])]
    g = helper.make_graph(nodes, "fold", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 12])])
    model = go.onnx_load(helper.make_model(g), device="cpu")
    plan = next(iter(model._plans.values()))
    assert plan.n_folded >= 2  # Gather and Concat ran at load time
    assert go.onnx_summary(model)["ggml_nodes"] <= 2
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(go.onnx_run(model, {"x": x})["y"], 1 / (1 + np.exp(-x.reshape(2, 12))), rtol=1e-5)


def test_shape_input_fed_at_run_time():
    """A Reshape's shape as a graph input is read on the host and the graph planned for it (as
    onnxruntime takes it); more in test_onnx_value_inputs.py."""
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")], "r",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("s", T.INT64, [2])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [3, 2])])
    model = go.onnx_load(helper.make_model(g), device="cpu")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(go.onnx_run(model, {"x": x, "s": np.array([3, 2])})["y"], x.reshape(3, 2))


def test_profile_and_cli(tiny, capsys):
    path, _, _ = tiny
    model = go.onnx_load(path, device="cpu")
    prof = go.onnx_profile(model, {"x": np.ones((2, 4), np.float32)}, runs=2)
    ops = {op for op, _, _ in prof}
    assert ops & {"MUL_MAT", "ggmlpy.gemm", "ggmlpy.linear"} and all(ms >= 0 and n >= 1 for _, ms, n in prof)
    from ggmlpy.cli.main import main
    assert main(["onnx", path, "--device", "cpu", "--runs", "2", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "ONNX model: tiny" in out and "output y: [2, 3] float32" in out and ("MUL_MAT" in out or "ggmlpy.linear" in out)
    assert main(["onnx", path + ".missing"]) == 1


def test_cli_rejects_names_that_are_not_inputs(tiny, tmp_path, capsys):
    """--input / --shape naming something that is not an input is an error in the CLI's own words
    (not a warning about input_shapes, then a run on random data)."""
    path, _, _ = tiny
    from ggmlpy.cli.main import main
    npy = tmp_path / "x.npy"
    np.save(npy, np.ones((2, 4), np.float32))
    assert main(["onnx", path, "--device", "cpu", "--input", f"wrongname={npy}"]) == 2
    err = capsys.readouterr().err
    assert "--input names 'wrongname', which is not an input of the model (its inputs: x)" in err
    assert "input_shapes" not in err
    assert main(["onnx", path, "--device", "cpu", "--shape", "nope=2x4"]) == 2
    assert "--shape names 'nope'" in capsys.readouterr().err
    assert main(["onnx", path, "--device", "cpu", "--input", f"x={npy}"]) == 0
    capsys.readouterr()
    np.save(npy, np.ones((3, 4), np.float32))  # a wrong shape: an error naming it, exit 1, no traceback
    assert main(["onnx", path, "--device", "cpu", "--input", f"x={npy}"]) == 1
    assert "the shape [3, 4], but the model declares [2, 4]" in capsys.readouterr().err


def test_gelu_pattern_fused():
    """Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5 becomes one ggml_gelu_erf; a pattern whose
    intermediate value is also an output is left alone (and computes the same)."""
    import math
    c = onnx.numpy_helper.from_array
    inits = [c(np.array(math.sqrt(2), np.float32), "s2"), c(np.array(1, np.float32), "one"),
             c(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("Div", ["x", "s2"], ["a"]), helper.make_node("Erf", ["a"], ["b"]),
             helper.make_node("Add", ["b", "one"], ["c"]), helper.make_node("Mul", ["x", "c"], ["d"]),
             helper.make_node("Mul", ["d", "half"], ["y"])]
    x = np.linspace(-4, 4, 24, dtype=np.float32).reshape(4, 6)
    want = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    for extra_out in (False, True):
        outs = [helper.make_tensor_value_info("y", T.FLOAT, [4, 6])]
        if extra_out:
            outs.append(helper.make_tensor_value_info("b", T.FLOAT, [4, 6]))
        g = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", T.FLOAT, [4, 6])], outs, inits)
        model = go.onnx_load(helper.make_model(g), device="cpu")
        assert next(iter(model._plans.values())).n_fused == (0 if extra_out else 1)
        np.testing.assert_allclose(go.onnx_run(model, {"x": x})["y"], want, rtol=1e-5, atol=1e-6)


def test_device_info_and_print(tiny, device):
    path, _, _ = tiny
    model = go.onnx_load(path, device=device)
    di = go.onnx_device_info(model)
    assert di["n_nodes"] >= 2 and di["gpu_ops"] + di["cpu_ops"] == di["n_nodes"]
    if device == "cpu":
        assert di["backends"] == ["CPU"] and di["n_backends"] == 1 and di["n_splits"] == 1 and di["gpu_ops"] == 0
    else:
        assert di["n_backends"] == 2 and di["backends"][-1] == "CPU" and di["gpu_ops"] > 0
        assert sum(di["cpu_only_ops"].values()) == di["cpu_ops"]
    text = str(model)
    assert text.splitlines()[0] == "ONNX Model: tiny" and "Ops: MatMul, Add, Relu" in text
