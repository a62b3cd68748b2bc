"""core.checked: ggml's shape rules written once, held against ggml itself, and every front end's
builder raising its own clear error (never aborting) on operands ggml asserts on.

What could abort the interpreter runs in a child process, so a regression is a failed test."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from ggmlpy.core import checked
from ggmlpy.errors import GGMLError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(code: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


# -- the table against ggml --------------------------------------------------------------------------
def T(*ne, type="f32", transposed=False, param=False):
    """A tensor operand of a probe: ggml dims, its type, a transposed view of it, a parameter."""
    return {"ne": list(ne) + [1] * (4 - len(ne)), "type": type, "transposed": transposed, "param": param}


# (ggml function, its arguments after the context): ggml accepts each of these ...
ACCEPTED = [
    ("ggml_add", [T(4, 3), T(4, 1)]), ("ggml_mul", [T(4, 3, 2), T(1, 3, 1)]), ("ggml_sub", [T(0, 3), T(0, 3)]),
    ("ggml_mul_mat", [T(5, 3), T(5, 7)]), ("ggml_mul_mat", [T(5, 3, 2), T(5, 7, 4)]),
    ("ggml_out_prod", [T(3, 5), T(7, 5)]),
    ("ggml_concat", [T(2, 3), T(2, 4), 1]), ("ggml_concat", [T(2, 3), T(5, 3), 0]),
    ("ggml_reshape_2d", [T(6), 2, 3]), ("ggml_reshape_4d", [T(2, 3, 4), 4, 3, 2, 1]),
    ("ggml_view_2d", [T(4, 4), 2, 2, 16, 0]), ("ggml_view_1d", [T(4, 4), 4, 48]),
    ("ggml_permute", [T(2, 3, 4), 1, 0, 2, 3]), ("ggml_permute", [T(2, 3, 4, 5), 3, 2, 1, 0]),
    ("ggml_get_rows", [T(4, 10), T(3, type="i32")]), ("ggml_get_rows", [T(4, 10, 2), T(3, 2, type="i32")]),
    ("ggml_repeat", [T(1, 3), T(4, 3)]), ("ggml_repeat_4d", [T(2, 1), 4, 3, 1, 1]),
    ("ggml_cpy", [T(6), T(2, 3)]),
    ("ggml_im2col", [T(3, 3, 2, 4), T(8, 8, 2, 1), 1, 1, 0, 0, 1, 1, True, 0]),
    ("ggml_conv_2d", [T(3, 3, 2, 4), T(8, 8, 2, 1), 2, 2, 1, 1, 1, 1]),
    ("ggml_pool_2d", [T(4, 4, 1, 1), 0, 2, 2, 2, 2, 0.0, 0.0]), ("ggml_pool_1d", [T(5, 2), 1, 2, 1, 0]),
    ("ggml_soft_max_ext", [T(4, 3), T(4, 3), 1.0, 0.0]), ("ggml_soft_max_ext", [T(4, 3, 2), T(4, 5), 1.0, 0.0]),
    ("ggml_acc", [T(4, 4), T(2, 2), 16, 64, 64, 0]),
    ("ggml_opt_step_sgd", [T(3, param=True), T(3), T(2)]),
    ("ggml_argmax", [T(4, 3)]),
]
# ... and aborts on each of these
REJECTED = [
    ("ggml_add", [T(4, 1), T(4, 3)]), ("ggml_div", [T(4, 3), T(3, 3)]),
    ("ggml_mul_mat", [T(5, 3), T(4, 7)]), ("ggml_mul_mat", [T(5, 3, 3), T(5, 7, 4)]),
    ("ggml_mul_mat", [T(3, 5, transposed=True), T(5, 7)]),
    ("ggml_concat", [T(2, 3), T(2, 4), 0]), ("ggml_concat", [T(2, 3), T(2, 3), 4]),
    ("ggml_reshape_2d", [T(6), 4, 2]), ("ggml_reshape_2d", [T(2, 3, transposed=True), 6, 1]),
    ("ggml_view_2d", [T(4, 4), 2, 2, 16, 60]),
    ("ggml_permute", [T(2, 3), 0, 0, 1, 2]),
    ("ggml_get_rows", [T(4, 10), T(3)]), ("ggml_get_rows", [T(4, 10, 2), T(3, type="i32")]),
    ("ggml_repeat", [T(2, 3), T(3, 3)]),
    ("ggml_cpy", [T(6), T(2, 2)]),
    ("ggml_im2col", [T(3, 3, 2, 4), T(8, 8, 3, 1), 1, 1, 0, 0, 1, 1, True, 0]),
    ("ggml_conv_2d", [T(3, 3, 2, 4), T(2, 2, 2, 1), 1, 1, 0, 0, 1, 1]),
    ("ggml_pool_2d", [T(4, 4, 1, 1), 0, 5, 5, 1, 1, 0.0, 0.0]),
    ("ggml_soft_max_ext", [T(4, 3), T(3, 3), 1.0, 0.0]),
    ("ggml_acc", [T(4, 4), T(5, 5), 20, 100, 100, 0]),
    ("ggml_opt_step_sgd", [T(3, param=True), T(4), T(2)]),
    ("ggml_argmax", [T(4, 3, 2)]),
]

_PROBE = """
    import json, sys
    from ggmlpy.bindings import ffi, lib
    from ggmlpy.core.checked import SHAPE_RULES
    TYPES = {"f32": lib.GGML_TYPE_F32, "i32": lib.GGML_TYPE_I32}
    params = ffi.new("struct ggml_init_params *", {"mem_size": 1 << 22, "mem_buffer": ffi.NULL, "no_alloc": True})
    ctx = lib.ggml_init(params[0])

    def operand(v):
        if not isinstance(v, dict):
            return v
        ne = list(v["ne"])
        if v["transposed"]:
            ne[0], ne[1] = ne[1], ne[0]
        t = lib.ggml_new_tensor(ctx, TYPES[v["type"]], 4, ffi.new("int64_t[]", ne))
        if v["param"]:
            lib.ggml_set_param(t)
        return lib.ggml_transpose(ctx, t) if v["transposed"] else t

    for fn, args in json.loads(sys.argv[1]):
        args = [operand(v) for v in args]
        print(json.dumps([fn, SHAPE_RULES[fn](*args)]), flush=True)
        if sys.argv[2] == "call":
            getattr(lib, fn)(ctx, *args)
            print("ggml accepted", flush=True)
"""


def test_every_accepted_shape_passes_its_rule_and_ggml():
    out = run_child(_PROBE, json.dumps(ACCEPTED), "call")
    assert out.returncode == 0, out.stdout[-800:] + out.stderr[-1500:]
    verdicts = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("[")]
    assert len(verdicts) == len(ACCEPTED)
    assert [v for v in verdicts if v[1] is not None] == []


def test_every_rejected_shape_fails_its_rule_and_aborts_ggml():
    out = run_child(_PROBE, json.dumps(REJECTED), "rule")
    assert out.returncode == 0, out.stderr[-1500:]
    verdicts = [json.loads(line) for line in out.stdout.splitlines()]
    assert [v for v in verdicts if v[1] is None] == [], "the rule accepts shapes ggml aborts on"
    assert all(isinstance(v[1], str) and v[1] for v in verdicts)
    for case in REJECTED:  # the rule is no stricter than it need be: ggml itself dies on each
        died = run_child(_PROBE, json.dumps([case]), "call")
        assert died.returncode != 0 and "ggml accepted" not in died.stdout, case


def test_every_ruled_function_is_a_ggml_function_and_is_probed():
    from ggmlpy.bindings import lib
    for name in checked.SHAPE_RULES:
        assert callable(getattr(lib, name)), name
    probed = {fn for fn, _ in ACCEPTED + REJECTED}
    assert {"ggml_add", "ggml_mul_mat", "ggml_concat", "ggml_reshape_2d", "ggml_view_2d", "ggml_permute",
            "ggml_get_rows", "ggml_im2col", "ggml_pool_2d"} <= probed


# -- every front end's builder: its own error, never an abort ------------------------------------------
_FRONT_ENDS = """
    import json
    import numpy as np
    from ggmlpy.bindings import lib as raw
    from ggmlpy.core.checked import ShapeError, GraphFull
    from ggmlpy.graph import GraphContext
    res = {}

    def attempt(name, fn):
        try:
            fn()
            res[name] = ["accepted", ""]
        except Exception as e:
            res[name] = [type(e).__name__, str(e), isinstance(e, ShapeError), isinstance(e, GraphFull)]

    gc = GraphContext(64)
    a, b = gc.new_tensor(raw.GGML_TYPE_F32, (4, 3)), gc.new_tensor(raw.GGML_TYPE_F32, (5, 5))

    from ggmlpy.autograd import prims
    attempt("prims.add", lambda: prims.add(gc.ctx, a, b))
    attempt("prims.matmul", lambda: prims.matmul(gc.ctx, a, b))

    from ggmlpy.optim import fused
    attempt("optim.sgd_step", lambda: fused.checked_lib.ggml_opt_step_sgd(gc.ctx, a, b, b))

    from ggmlpy.keras.builder import KerasGraphBuilder
    kb = KerasGraphBuilder(training=False)
    x, w = kb.new_w([4, 3]), kb.new_w([5, 2])
    attempt("keras.matmul", lambda: kb.matmul(w, x))
    attempt("keras.add", lambda: kb.add(x, w))
    attempt("keras.reshape", lambda: kb.reshape(x, [5, 5]))
    kb.free()

    from onnx import helper
    from ggmlpy.onnx.graph import OnnxGraphBuilder
    from ggmlpy.onnx.onnx_lib import onnx_lib
    ob = OnnxGraphBuilder([helper.make_node("Relu", ["x"], ["y"])])
    p, q = ob.new_tensor(raw.GGML_TYPE_F32, (4,)), ob.new_tensor(raw.GGML_TYPE_F32, (3,))
    attempt("onnx.add", lambda: onnx_lib.ggml_add(ob.ctx, p, q))
    attempt("onnx.concat", lambda: onnx_lib.ggml_concat(ob.ctx, p, q, 7))
    ob.free()

    import ggmlpy as g
    ctx = g.ggml_init(1 << 20)
    attempt("ggml_add", lambda: g.ggml_add(ctx, g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, 4),
                                           g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, 3)))
    gc.free()
    print(json.dumps(res))
"""


def test_a_bad_shape_at_each_front_ends_builder_is_its_own_clear_error():
    out = run_child(_FRONT_ENDS)
    assert out.returncode == 0, f"the child died ({out.returncode}): {out.stdout[-600:]}\n{out.stderr[-1500:]}"
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert not [name for name, r in res.items() if r[0] == "accepted"], res
    for name in ("prims.add", "prims.matmul", "optim.sgd_step", "keras.matmul", "keras.add", "keras.reshape",
                 "ggml_add"):
        kind, msg, is_shape, _ = res[name]
        assert is_shape, (name, res[name])
        assert msg.startswith("ggml_"), (name, msg)  # names the ggml call
    for name in ("onnx.add", "onnx.concat"):
        kind, msg, is_shape, _ = res[name]
        assert kind == "OnnxShapeError" and is_shape and "internal error in ggml_" in msg, (name, res[name])


def test_checked_lib_raises_the_front_ends_error_types():
    class Mine(checked.ShapeError):
        pass

    class Full(checked.GraphFull):
        pass

    from ggmlpy.graph import GraphContext
    from ggmlpy.bindings import lib as raw
    mine = checked.CheckedLib(Mine, Full, prefix="in my builder: ")
    gc = GraphContext(4)
    try:
        a, b = gc.new_tensor(raw.GGML_TYPE_F32, (4, 3)), gc.new_tensor(raw.GGML_TYPE_F32, (3, 4))
        with pytest.raises(Mine, match="in my builder: ggml_mul_mat: .*must share ne0"):
            mine.ggml_mul_mat(gc.ctx, a, b)
        with pytest.raises(Full, match="outgrew its context"):
            for _ in range(100):
                a = mine.ggml_neg(gc.ctx, a)
    finally:
        gc.free()
    assert mine.GGML_TYPE_F32 == raw.GGML_TYPE_F32 and mine.ggml_nelements is raw.ggml_nelements


def test_the_ggml_wrappers_report_the_tables_rule_under_their_own_name():
    import ggmlpy as g
    ctx = g.ggml_init(1 << 20)
    try:
        a = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 4, 3)
        b = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 5, 3)
        with pytest.raises(GGMLError, match="ggml_mul_mat: a \\[4, 3\\] and b \\[5, 3\\] must share ne0"):
            g.ggml_mul_mat(ctx, a, b)
        with pytest.raises(GGMLError, match="ggml_concat: .*differ outside dim 1"):
            g.ggml_concat(ctx, a, b, 1)
        with pytest.raises(GGMLError, match="ggml_reshape_2d: cannot reshape 12 elements"):
            g.ggml_reshape_2d(ctx, a, 5, 5)
        with pytest.raises(GGMLError, match="ggml_permute: axes must be a permutation"):
            g.ggml_permute(ctx, a, 0, 0, 1, 2)
        assert g.ggml_mul_mat(ctx, a, g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 4, 7)).shape == (3, 7)
    finally:
        g.ggml_free(ctx)


# -- graph/: the owner of a context and its placement; the Keras-like builder on graph/ -----------------
def test_placed_graph_places_its_graph_and_frees_both():
    import numpy as np
    from ggmlpy.bindings import ffi, lib as raw
    from ggmlpy.core.device import get_backend
    from ggmlpy.graph import PlacedGraph
    plan = PlacedGraph(8)
    a = plan.gctx.new_tensor(raw.GGML_TYPE_F32, (4,))
    out = checked.checked_lib.ggml_neg(plan.gctx.ctx, a)
    plan.gctx.expand([out])
    run = plan.place(get_backend("cpu"))
    assert plan.run is run and run.nodes
    x = np.arange(4, dtype=np.float32)
    a.data = ffi.from_buffer(x)
    run.compute()
    assert list(run.read(out, (4,))) == [0.0, -1.0, -2.0, -3.0]
    plan.free()
    assert plan.run is None and plan.gctx is None
    plan.free()  # twice is harmless (and the finalizer's call)


def test_a_keras_graph_past_the_first_compute_context_is_built_again_in_a_bigger_one():
    """A recurrent layer over 5000 steps makes more than the builder's first 65 536 compute
    tensors: GraphFull, then the same graph in a context four times bigger (graph.GraphContext
    .retrying), where it used to be refused as too big."""
    import numpy as np
    import ggmlpy as g
    m = g.ggml_model_sequential()
    m = g.ggml_layer_gru(m, units=2, input_shape=(5000, 1))
    m = g.ggml_layer_dense(m, 2)
    m = g.ggml_compile(m, loss="mse")
    x = np.random.default_rng(0).normal(size=(1, 5000, 1)).astype(np.float32)
    y = g.ggml_predict(m, x)
    assert y.shape == (1, 2) and np.isfinite(y).all()
