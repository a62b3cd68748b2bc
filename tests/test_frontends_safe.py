"""Safe in every front end (the Keras-like models, the ONNX importer, the CLI): what ggml asserts
on is a clear error before ggml sees it, hostile inputs are refused or handled, NaN is kept
through ReLU, and errors are ggmlpy's own kind naming the argument or file. Calls that aborted
the process before run in a child process, so a regression is a failed test, not a dead run."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.core.opt.context import OptParams
from ggmlpy.errors import GGMLError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def _last_json(out: subprocess.CompletedProcess):
    assert out.returncode == 0, f"the child died ({out.returncode}) after: {out.stdout[-600:]}\n{out.stderr[-1500:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- optimizer settings ggml_opt asserts on ----------------------------------------------------------------
BAD_SETTINGS = {  # each aborted the interpreter inside ggml_opt_eval (or gave NaN weights silently)
    "lr=-1": ("adam", dict(lr=-1)), "lr=0": ("adam", dict(lr=0)), "lr=nan": ("adam", dict(lr=float("nan"))),
    "lr=inf": ("adam", dict(lr=float("inf"))), "lr=1e-50 (0 in float32)": ("adam", dict(lr=1e-50)),
    "sgd lr=-1": ("sgd", dict(lr=-1)), "beta1=1.5": ("adam", dict(beta1=1.5)), "beta1=1": ("adam", dict(beta1=1.0)),
    "beta2=-0.5": ("adam", dict(beta2=-0.5)), "beta2=1": ("adam", dict(beta2=1.0)), "eps=-1": ("adam", dict(eps=-1)),
    "eps=0": ("adam", dict(eps=0.0)), "weight_decay=2": ("adam", dict(weight_decay=2)),
    "sgd weight_decay=-1": ("sgd", dict(weight_decay=-1)), "lr='x'": ("adam", dict(lr="x")),
    "beta1=None": ("adam", dict(beta1=None)),
}


def test_optimizer_settings_ggml_asserts_on_are_refused_at_compile():
    out = run_child(f"""
        import json, numpy as np, ggmlpy as g
        cases = json.loads({json.dumps(BAD_SETTINGS)!r})
        res = {{}}
        X = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
        Y = np.eye(2, dtype=np.float32)[np.random.default_rng(1).integers(0, 2, 64)]
        for name, (opt, kw) in cases.items():
            print("case", name, flush=True)
            m = g.ggml_layer_dense(g.ggml_model_sequential(), 4, activation="relu", input_shape=(3,))
            m = g.ggml_layer_dense(m, 2, activation="softmax")
            try:
                g.ggml_compile(m, opt, **kw)
            except g.GGMLError as e:
                res[name] = ["compile", str(e)]
                continue
            try:
                g.ggml_fit(m, X, Y, verbose=0)
                res[name] = ["accepted", ""]
            except Exception as e:
                res[name] = ["fit", type(e).__name__]
        print(json.dumps(res))
    """)
    res = _last_json(out)
    for name, (opt, kw) in BAD_SETTINGS.items():
        when, msg = res[name]
        assert when == "compile", (name, res[name])
        assert next(iter(kw)) in msg, (name, msg)  # the argument is named


def test_good_optimizer_settings_still_train():
    X = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
    Y = np.eye(2, dtype=np.float32)[np.random.default_rng(1).integers(0, 2, 32)]
    for opt, kw in (("adam", dict(lr=1e-2, beta1=0.0, beta2=0.5, eps=1e-6, weight_decay=1.0)),
                    ("sgd", dict(lr=0.1, weight_decay=0.0))):
        m = g.ggml_layer_dense(g.ggml_model_sequential(), 2, activation="softmax", input_shape=(3,))
        g.ggml_compile(m, opt, **kw)
        g.ggml_fit(m, X, Y, epochs=2, batch_size=8, verbose=0)
        assert all(np.isfinite(w).all() for layer in m.get_weights().values() for w in layer.values()), (opt, kw)


def test_learning_rates_set_later_are_checked_too():
    """ggml_opt_set_lr, ggml_opt_init and a callback's state.lr reach the same asserts."""
    with pytest.raises(GGMLError, match="adamw_lr"):
        g.ggml_opt_set_lr(OptParams("adamw", 1e-3), adamw_lr=1e-50)
    with pytest.raises(GGMLError, match="lr"):
        OptParams("sgd", float("inf"))
    pars = OptParams("adamw", 1e-3)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(GGMLError, match="learning rate"):
            pars.lr = bad
    assert pars.lr == pytest.approx(1e-3)


# -- hostile ONNX graphs -----------------------------------------------------------------------------------
_HOSTILE = """
    import json, time, numpy as np, ggmlpy as g
    from onnx import helper, TensorProto
    def model(op, n, out_rows, **attrs):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [out_rows, 3])
        node = helper.make_node(op, ["x"] * n, ["y"], **attrs)
        return helper.make_model(helper.make_graph([node], "hostile", [x], [y]),
                                 opset_imports=[helper.make_opsetid("", 17)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    res = {}
    for op, n, rows, attrs in (("Sum", 10000, 2, {}), ("Mean", 3000, 2, {}), ("Max", 3000, 2, {}),
                               ("Concat", 10000, 20000, {"axis": 0})):
        print("case", op, n, flush=True)
        t = time.perf_counter()
        try:
            y = g.onnx_run(g.onnx_load(model(op, n, rows, **attrs), device="cpu"), {"x": x})["y"]
            res[op] = ["ran", y.tolist() if y.size < 100 else [y.shape, float(y.sum())], time.perf_counter() - t]
        except g.OnnxError as e:
            res[op] = ["refused", str(e), time.perf_counter() - t]
    print(json.dumps(res))
"""


def test_a_node_with_thousands_of_inputs_runs_or_is_refused_never_aborts():
    """A Sum of one input 10 000 times ran the op context out (GGML_ASSERT(obj_new), SIGABRT);
    a 10 000-input Concat spent 54 s building (a quadratic error message and a chain of copies).
    The context is now sized from the model's nodes and operands, and Concat is a balanced tree."""
    res = _last_json(run_child(_HOSTILE))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert res["Sum"][0] == "ran" and np.allclose(res["Sum"][1], 10000 * x), res["Sum"]
    assert res["Mean"][0] == "ran" and np.allclose(res["Mean"][1], x), res["Mean"]
    assert res["Max"][0] == "ran" and np.allclose(res["Max"][1], x), res["Max"]
    assert res["Concat"][0] == "ran" and res["Concat"][1] == [[20000, 3], 10000 * 15.0], res["Concat"]
    assert res["Concat"][2] < 20, f"a 10 000-input Concat took {res['Concat'][2]:.1f} s"


def test_a_builder_that_overruns_its_context_is_an_onnx_error():
    """onnx_lib checks the room before every ggml call that makes a tensor: the last line of
    defence if a converter makes far more tensors than its node's budget."""
    out = run_child("""
        import ggmlpy as g
        from onnx import helper
        from ggmlpy.onnx.graph import OnnxGraphBuilder, OnnxError
        from ggmlpy.onnx.onnx_lib import onnx_lib
        b = OnnxGraphBuilder([helper.make_node("Relu", ["x"], ["y"])])
        x = b.new_tensor(g.GGML_TYPE_F32, (4,))
        try:
            for _ in range(100000):
                x = onnx_lib.ggml_neg(b.ctx, x)
            print("no error")
        except OnnxError as e:
            print("raised", e)
        b.free()
    """)
    assert out.returncode == 0 and "outgrew its context" in out.stdout, out.stdout + out.stderr[-1000:]


# -- NaN through ReLU in every front end --------------------------------------------------------------------
SPECIALS = np.array([[np.nan, -np.inf, -2.0, -0.0, 0.0, 3.0, np.inf, 1e30, -1e30]], np.float32)
RELU_OF_SPECIALS = np.array([[np.nan, 0.0, 0.0, 0.0, 0.0, 3.0, np.inf, 1e30, 0.0]], np.float32)  # PyTorch, onnxruntime


@pytest.fixture(params=[True, False], ids=["kernels", "ggml-ops"])
def kernels_on(request):
    from ggmlpy import kernels
    before = kernels.set_enabled(request.param)
    yield request.param
    kernels.set_enabled(before)


def _onnx_relu_model():
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SPECIALS.shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SPECIALS.shape))
    return helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 17)])


def _onnx_cnn(prelu=False, M=4):
    """Conv + Relu (fused into conv.c's kernel where the kernels are on; M >= 128 channels take its
    AVX-512 packed product, where there is one) -> flatten -> MatMul."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(M, 1, 3, 3)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.normal(size=(M,)).astype(np.float32), "B"),
             numpy_helper.from_array(rng.normal(size=(M * 8 * 8, 3)).astype(np.float32), "W2"),
             numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
             numpy_helper.from_array(np.full((1, M, 1, 1), 0.1, np.float32), "slope")]
    act = helper.make_node("PRelu", ["c", "slope"], ["r"]) if prelu else helper.make_node("Relu", ["c"], ["r"])
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]), act,
             helper.make_node("Reshape", ["r", "shape"], ["f"]), helper.make_node("MatMul", ["f", "W2"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    return helper.make_model(helper.make_graph(nodes, "cnn", [x], [y], initializer=inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_relu_keeps_nan_as_onnxruntime(kernels_on):
    ort = pytest.importorskip("onnxruntime")
    m = _onnx_relu_model()
    got = g.onnx_run(g.onnx_load(m, device="cpu"), {"x": SPECIALS})["y"]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": SPECIALS})[0]
    np.testing.assert_array_equal(want, RELU_OF_SPECIALS)
    np.testing.assert_array_equal(got, want)


# ops that ggml builds from comparisons (clamp, leaky_relu, max and min), which map NaN to a number
NAN_CASES = {
    "LeakyRelu": ([], {"alpha": 0.1}), "HardSigmoid": ([], {}), "HardSwish": ([], {}),
    "Clip": (["lo", "hi"], {}), "Max": (["other"], {}), "Min": (["other"], {}),
}


def _onnx_specials_model(op, operands, attrs, fed: bool):
    """One node over SPECIALS; its other operands are initializers or (fed) graph inputs."""
    from onnx import TensorProto, helper, numpy_helper
    values = {"lo": np.array(-1.5, np.float32), "hi": np.array(2.0, np.float32),
              "other": np.array([[5.0, np.nan, -np.inf, np.inf, -3.0, 2.0, -1e30, 1e30, 0.0]], np.float32)}
    feeds = {k: values[k] for k in operands}
    info = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in feeds.items()]
    inits = [] if fed else [numpy_helper.from_array(v, k) for k, v in feeds.items()]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SPECIALS.shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SPECIALS.shape))
    graph = helper.make_graph([helper.make_node(op, ["x", *operands], ["y"], **attrs)], op.lower(),
                              [x, *(info if fed else [])], [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds if fed else {}


@pytest.mark.parametrize("op, fed", [(op, fed) for op in sorted(NAN_CASES) for fed in (False, True)
                                     if NAN_CASES[op][0] or not fed])
def test_onnx_ops_built_from_comparisons_keep_nan_and_infinities_as_onnxruntime(kernels_on, op, fed):
    """Max(1, NaN) was 1 and Max(-inf, 5) NaN (built as x + relu(y - x), which also rounds
    Max(-1e30, 1) to 0), LeakyRelu, HardSigmoid and a constant Clip turned NaN into a number."""
    ort = pytest.importorskip("onnxruntime")
    operands, attrs = NAN_CASES[op]
    m, feeds = _onnx_specials_model(op, operands, attrs, fed)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": SPECIALS, **feeds})[0]
    got = g.onnx_run(g.onnx_load(m, device="cpu"), {"x": SPECIALS, **feeds})["y"]
    if not kernels_on and (op in ("Max", "Min") or op == "Clip" and fed):
        # ggml ops' select is exact for numbers; an infinite operand may give NaN there (inf * 0)
        finite = np.isfinite(SPECIALS) | np.isnan(SPECIALS)
        if op != "Clip":
            other = _onnx_specials_model(op, operands, attrs, True)[1]["other"]
            finite &= np.isfinite(other) | np.isnan(other)
        np.testing.assert_array_equal(got[finite], want[finite])
        assert np.all((got[~finite] == want[~finite]) | np.isnan(got[~finite]))
        return
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("prelu, M", [(False, 4), (True, 4), (False, 128)], ids=["relu", "prelu", "relu-128"])
def test_a_cnn_with_one_nan_pixel_gives_nan_logits_as_onnxruntime(kernels_on, prelu, M):
    """A CNN with one NaN pixel gave finite logits (ggml's relu and conv.c's fused one mapped NaN to 0)."""
    ort = pytest.importorskip("onnxruntime")
    m = _onnx_cnn(prelu, M)
    x = np.random.default_rng(1).normal(size=(1, 1, 8, 8)).astype(np.float32)
    x[0, 0, 3, 4] = np.nan
    got = g.onnx_run(g.onnx_load(m, device="cpu"), {"x": x})["y"]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.isnan(want).all() and np.isnan(got).all(), (got, want)
    x[0, 0, 3, 4] = 0.5  # and the finite image still matches
    got = g.onnx_run(g.onnx_load(m, device="cpu"), {"x": x})["y"]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _keras_relu_net(units=3):
    m = g.ggml_layer_dense(g.ggml_model_sequential(), 8, activation="relu", input_shape=(3,))
    m = g.ggml_layer_dense(m, units, activation="softmax")
    return g.ggml_compile(m, "adam")


def test_keras_predict_and_fit_keep_nan(kernels_on):
    """ggml_predict on a row with a NaN returned [1/3, 1/3, 1/3]; ggml_fit on it a finite loss."""
    m = _keras_relu_net()
    X = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
    Y = np.eye(3, dtype=np.float32)[np.random.default_rng(1).integers(0, 3, 32)]
    X[0, 1] = np.nan
    p = g.ggml_predict(m, X[:2])
    assert np.isnan(p[0]).all() and np.isfinite(p[1]).all(), p
    g.ggml_fit(m, X, Y, epochs=1, batch_size=32, verbose=0)
    assert np.isnan(m.history.train_loss[0]), m.history.train_loss


@pytest.mark.parametrize("act", ["hardsigmoid", "hardswish"])
def test_keras_hard_activations_keep_nan_in_predict(kernels_on, act):
    """ggml's hardsigmoid clamps NaN to 0 (hardswish's product with x keeps it)."""
    m = g.ggml_layer_dense(g.ggml_model_sequential(), 4, activation=act, input_shape=(3,))
    m = g.ggml_compile(m, "adam")
    X = np.array([[np.nan, 1.0, 2.0], [0.5, -1.0, 2.0]], np.float32)
    p = g.ggml_predict(m, X)
    assert np.isnan(p[0]).all() and np.isfinite(p[1]).all(), p


def test_keras_relu_of_specials(kernels_on):
    m = g.ggml_layer_dense(g.ggml_model_sequential(), 1, activation="relu", input_shape=(1,))
    g.ggml_compile(m, "sgd", loss="mse")
    name = next(iter(m.get_weights()))
    m.set_weights({name: {"weight": np.ones((1, 1), np.float32), "bias": np.zeros(1, np.float32)}})
    got = g.ggml_predict(m, SPECIALS.reshape(-1, 1)).ravel()
    np.testing.assert_array_equal(got, np.asarray(RELU_OF_SPECIALS).ravel())


# -- errors of ggmlpy's own kind, naming the argument or file -------------------------------------------------
_MISTYPED = [("layers", 5), ("type", None), ("compile", "x"), ("layers", [{"kind": ["dense"]}]),
             ("layers", [None]), ("layers", [{"kind": "dense", "name": "d", "trainable": True, "config": None}])]


def _edited_architecture(arch: dict, i: int, rng) -> str:
    text = json.dumps(arch)
    if i % 4 == 2:
        j = int(rng.integers(0, len(text)))
        return text[:j] + str(rng.choice(list('{}[]":,0a-'))) + text[j + 1:]
    key, value = _MISTYPED[(i // 4) % len(_MISTYPED)]
    return json.dumps(dict(arch, **{key: value}))


def _damaged_bytes(good: bytes, i: int, rng, rewrite):
    """Byte flips, truncations, or (through rewrite(architecture text)) a broken or mistyped architecture."""
    b = bytearray(good)
    if i % 4 == 0:
        for _ in range(int(rng.integers(1, 8))):
            b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        return bytes(b)
    if i % 4 == 1:
        return bytes(b[:int(rng.integers(0, len(b)))])
    return rewrite(i)


def _damaged_keras_files(good: bytes, n: int):
    """Damaged model files: ggml_save_model's GGUF, and the .npz files of earlier versions."""
    import io as _io
    from ggmlpy.io import model_file
    rng = np.random.default_rng(0)
    f = model_file.read_model_file(good, ["keras.model"], "test")
    arch = f.json("ggmlpy.architecture")

    def gguf_with(i):
        keys = dict(f.keys, **{"ggmlpy.architecture": _edited_architecture(arch, i, rng)})
        return model_file.model_file_bytes("keras.model", [(k, a, None) for k, a in f.arrays.items()], keys, "test")
    npz = (pathlib.Path(__file__).resolve().parent / "keras_npz" / "sequential.npz").read_bytes()
    z = dict(np.load(_io.BytesIO(npz)))
    npz_arch = json.loads(str(z["__architecture__"]))

    def npz_with(i):
        buf = _io.BytesIO()
        np.savez(buf, **dict(z, __architecture__=np.array(_edited_architecture(npz_arch, i, rng))))
        return buf.getvalue()
    for i in range(n):
        yield _damaged_bytes(good, i, rng, gguf_with)
        yield _damaged_bytes(npz, i, rng, npz_with)


def test_damaged_keras_model_files_are_ggml_errors():
    """ggml_load_model let BadZipFile, KeyError, JSONDecodeError and TypeError through."""
    m = _keras_relu_net()
    good = g.keras.io.model_bytes(m)
    others = []
    for b in _damaged_keras_files(good, 200):
        try:
            g.keras.io.model_from_bytes(b)
        except (GGMLError, g.DeviceError):
            pass
        except Exception as e:  # noqa: BLE001 - what the test counts
            others.append(f"{type(e).__name__}: {e}")
    assert not others, others[:5]
    with pytest.raises(GGMLError, match="ggml_load_model: path"):
        g.ggml_load_model(None)


def test_model_file_paths_are_checked(tmp_path):
    model = g.ag_sequential(g.ag_linear(2, 2))
    with pytest.raises(GGMLError, match="ag_save_model: path"):
        g.ag_save_model(model, None)
    with pytest.raises(GGMLError, match="ag_load_model: path"):
        g.ag_load_model(model, 3)
    with pytest.raises(GGMLError, match="ggml_save_model: path"):
        g.ggml_save_model(_keras_relu_net(), None)
    np.save(tmp_path / "lone.npy", np.zeros(3))
    with pytest.raises(GGMLError, match="lone.npy"):
        g.ggml_load_model(tmp_path / "lone.npy")


def _bad_array(kind, shape):
    if kind == "rectangular":  # a ragged list: one row short
        rows = np.ones(shape).reshape(shape[0], -1).tolist()
        return rows[:-1] + [rows[-1][:-1]] if len(rows) > 1 else [rows[0], rows[0][:-1]]
    fill = {"complex": 1 + 2j, "None": None, "numbers": "1.5"}[kind]
    a = np.ones(shape).astype(object)
    a.flat[1] = fill
    return a if kind != "complex" else a.astype(complex)


@pytest.mark.parametrize("kind", ["rectangular", "complex", "None", "numbers"])
def test_arrays_numpy_converts_silently_are_refused_in_every_front_end(kind):
    """ag_tensor of a ragged list raised numpy's ValueError; onnx_run and the Keras-like models
    dropped a complex number's imaginary part, turned None into NaN and parsed strings."""
    with pytest.raises(GGMLError, match=kind):
        g.ag_tensor(_bad_array(kind, (2, 3)))
    model = g.onnx_load(_onnx_relu_model(), device="cpu")
    with pytest.raises(g.OnnxError, match=kind):
        g.onnx_run(model, {"x": _bad_array(kind, SPECIALS.shape)})
    m = _keras_relu_net()
    x = _bad_array(kind, (4, 3))
    x = [x] if kind == "rectangular" else x  # a list of arrays is one per input
    with pytest.raises(GGMLError, match=kind):
        g.ggml_predict(m, x)
    with pytest.raises(GGMLError, match=kind):
        g.ggml_fit(m, np.ones((4, 3)), _bad_array(kind, (4, 3)), verbose=0)


def test_keras_arguments_silently_rounded_or_ignored_are_refused():
    for make, match in ((lambda: g.ggml_layer_dense(g.ggml_model_sequential(), 2.5, input_shape=(3,)), "units"),
                        (lambda: g.ggml_layer_dense(g.ggml_model_sequential(), True, input_shape=(3,)), "units"),
                        (lambda: g.ggml_layer_conv_2d(g.ggml_model_sequential(), 1.5, 3, input_shape=(4, 4, 1)),
                         "filters"),
                        (lambda: g.ggml_layer_conv_2d(g.ggml_model_sequential(), 2, 2.5, input_shape=(4, 4, 1)),
                         "kernel_size"),
                        (lambda: g.ggml_layer_dense(g.ggml_model_sequential(), 2, input_shape=(3.5,)), "input_shape"),
                        (lambda: g.ggml_compile(_keras_relu_net(), metrics=["bogus"]), "metrics")):
        with pytest.raises(GGMLError, match=match):
            make()
    m = _keras_relu_net()
    X, Y = np.ones((8, 3), np.float32), np.eye(3, dtype=np.float32)[[0, 1] * 4]
    for kw, match in ((dict(epochs=2.5), "epochs"), (dict(batch_size=2.5), "batch_size"),
                      (dict(validation_split="x"), "validation_split")):
        with pytest.raises(GGMLError, match=match):
            g.ggml_fit(m, X, Y, verbose=0, **kw)
    assert g.ggml_layer_dense(g.ggml_model_sequential(), 2.0, input_shape=(3,)).layers[0].units == 2  # R's numerics
    assert g.ggml_compile(_keras_relu_net(), metrics="accuracy").metrics == ["accuracy"]


def _write(tmp_path, name, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_onnx_files_that_raised_pythons_errors_are_onnx_errors(tmp_path):
    """onnx_load let UnicodeDecodeError (the checker's message about a name that is not UTF-8) and
    ZeroDivisionError (a Conv with stride 0) through, and accepted opset 1000 (onnxruntime refuses it)."""
    from onnx import TensorProto, helper, numpy_helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])

    def model(node, opset=17, inits=()):
        return helper.make_model(helper.make_graph([node], "g", [x], [y], initializer=list(inits)),
                                 opset_imports=[helper.make_opsetid("", opset)])
    w = numpy_helper.from_array(np.ones((1, 1, 2, 2), np.float32), "W")
    stride0 = model(helper.make_node("Conv", ["x", "W"], ["y"], strides=[0, 0], name="c"), inits=[w])
    with pytest.raises(g.OnnxError, match="node 'c' \\(Conv\\): strides"):
        g.onnx_load(stride0, device="cpu")
    not_utf8 = model(helper.make_node("Reluq", ["x"], ["y"])).SerializeToString().replace(b"Reluq", b"Rel\xff\xfe")
    with pytest.raises(g.OnnxError, match="not a valid ONNX model"):
        g.onnx_load(_write(tmp_path, "utf8.onnx", not_utf8), device="cpu")
    with pytest.raises(g.OnnxError, match="opset 1000"):
        g.onnx_load(model(helper.make_node("Relu", ["x"], ["y"]), opset=1000), device="cpu")


def test_a_converter_failing_with_pythons_error_is_an_onnx_error_naming_the_node(monkeypatch):
    from ggmlpy.onnx import op_table

    def broken(b, node, ins, at):
        return [][1]
    monkeypatch.setitem(op_table.OPS, "Relu", broken)
    with pytest.raises(g.OnnxError, match="node 'y' \\(Relu\\): cannot be built: IndexError"):
        g.onnx_load(_onnx_relu_model(), device="cpu")


def test_the_onnx_cli_reports_bad_arguments_without_a_traceback(tmp_path):
    import onnx
    path = tmp_path / "relu.onnx"
    onnx.save(_onnx_relu_model(), str(path))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    for extra in (["--input", "x=/nonexistent/x.npy"], ["--shape", "x=1xax3"], ["--shape", "x"],
                  ["--input", f"x={path}"]):
        out = subprocess.run([sys.executable, "-m", "ggmlpy", "onnx", str(path), "--device", "cpu", *extra],
                             capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
        assert out.returncode == 2 and "Traceback" not in out.stderr and "ggmlpy onnx:" in out.stderr, \
            (extra, out.returncode, out.stderr[-800:])

