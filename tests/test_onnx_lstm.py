"""ONNX LSTM on ggml's CPU backend through ggmlpy's rnn.c kernel: a direction's whole sequence is one
node (instead of about sixteen ggml nodes a step). Every case against onnx's reference
implementation, with the kernels on and off: directions, peepholes, initial states, batches,
hidden sizes that are not a multiple of a vector, batch-first layout, NaN inputs."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import ggmlpy  # noqa: E402
from ggmlpy import kernels  # noqa: E402
from ggmlpy.bindings import ffi, lib  # noqa: E402

K = kernels.get()
needs_rnn = pytest.mark.skipif(K is None or K.lstm is None, reason="no rnn.c kernel (no C compiler)")
RNG = np.random.default_rng(5)


def lstm_model(T_, N, I, H, direction="forward", peepholes=False, states=False, layout=0):
    nd = 2 if direction == "bidirectional" else 1
    inits = {"W": (RNG.standard_normal((nd, 4 * H, I)) / np.sqrt(I)).astype(np.float32),
             "R": (RNG.standard_normal((nd, 4 * H, H)) / np.sqrt(H)).astype(np.float32),
             "B": (RNG.standard_normal((nd, 8 * H)) * 0.3).astype(np.float32)}
    ins = ["x", "W", "R", "B"]
    xs = (N, T_, I) if layout else (T_, N, I)
    sshape = (N, nd, H) if layout else (nd, N, H)
    inputs = [helper.make_tensor_value_info("x", T.FLOAT, xs)]
    if states or peepholes:
        ins += ["", "h0" if states else "", "c0" if states else ""]
        if states:
            inputs += [helper.make_tensor_value_info(n, T.FLOAT, sshape) for n in ("h0", "c0")]
    if peepholes:
        ins.append("P")
        inits["P"] = (RNG.standard_normal((nd, 3 * H)) * 0.5).astype(np.float32)
    node = helper.make_node("LSTM", ins, ["y", "yh", "yc"], hidden_size=H, direction=direction, layout=layout)
    y_shape = (N, T_, nd, H) if layout else (T_, nd, N, H)
    outs = [helper.make_tensor_value_info(n, T.FLOAT, s) for n, s in (("y", y_shape), ("yh", sshape), ("yc", sshape))]
    g = helper.make_graph([node], "m", inputs, outs, [numpy_helper.from_array(a, n) for n, a in inits.items()])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    feeds = {"x": RNG.standard_normal(xs).astype(np.float32)}
    if states:
        feeds["h0"] = RNG.standard_normal(sshape).astype(np.float32)
        feeds["c0"] = RNG.standard_normal(sshape).astype(np.float32)
    return proto, feeds


def custom_nodes(m):
    plan = next(iter(m._plans.values()))
    nodes = [lib.ggml_graph_node(plan.graph, i) for i in range(plan.n_nodes)]
    return [t for t in nodes if t.op == lib.GGML_OP_CUSTOM and ffi.string(t.name) == b"ggmlpy.lstm"]


def run(proto, feeds, threads):
    m = ggmlpy.onnx_load(proto, device="cpu", n_threads=threads)
    out = ggmlpy.onnx_run(m, feeds)
    return m, [out[n] for n in ("y", "yh", "yc")]


CASES = [  # T, N, input, hidden, direction, peepholes, initial states, layout
    (7, 1, 5, 16, "forward", False, False, 0),
    (6, 3, 4, 20, "reverse", False, True, 0),        # hidden 20: vectors and a tail
    (5, 2, 3, 8, "bidirectional", True, True, 0),    # hidden 8: below one vector
    (9, 2, 6, 40, "forward", True, False, 1),        # batch first, 160 gates: a chunk of 128 and 2 vectors
    (4, 1, 8, 128, "bidirectional", False, False, 0),
]


@needs_rnn
@pytest.mark.parametrize("case", CASES, ids=lambda c: "T{}N{}I{}H{}-{}-peep{}-states{}-layout{}".format(*c))
@pytest.mark.parametrize("threads", [1, 2])
def test_lstm_is_one_node_a_direction_and_matches_the_reference(case, threads):
    proto, feeds = lstm_model(*case)
    want = ReferenceEvaluator(proto).run(None, feeds)
    m, got = run(proto, feeds, threads)
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=2e-6)
    assert len(custom_nodes(m)) == (2 if case[4] == "bidirectional" else 1)
    prev = kernels.set_enabled(False)
    try:
        m0, got0 = run(proto, feeds, threads)
    finally:
        kernels.set_enabled(prev)
    assert not custom_nodes(m0)
    for g_, w_ in zip(got0, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=2e-6)


@needs_rnn
def test_lstm_kernel_keeps_nan_and_saturates_at_large_gates():
    """A NaN input poisons the steps from its own on (never a finite value in its place); huge
    pre-activations saturate the gates as the reference does (sigmoid 0 or 1, tanh -1 or 1)."""
    proto, feeds = lstm_model(6, 2, 4, 24)
    feeds["x"][3, 0, 1] = np.nan
    _, (y, yh, yc) = run(proto, feeds, 1)
    assert np.isfinite(y[:3]).all() and np.isnan(y[3:, :, 0]).all() and np.isfinite(y[:, :, 1]).all()
    feeds["x"] = (RNG.standard_normal(feeds["x"].shape) * 1e4).astype(np.float32)
    with np.errstate(over="ignore"):  # the reference's own exp overflows to inf (a sigmoid of 0)
        want = ReferenceEvaluator(proto).run(None, feeds)
    _, got = run(proto, feeds, 1)
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=2e-6)


def kernel_names(m):
    plan = next(iter(m._plans.values()))
    nodes = [lib.ggml_graph_node(plan.graph, i) for i in range(plan.n_nodes)]
    return [ffi.string(t.name).decode() for t in nodes if t.op == lib.GGML_OP_CUSTOM]


@needs_rnn
@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[3]], ids=["reverse", "bidirectional", "batch_first"])
def test_input_projection_is_one_linear_node_a_direction(case):
    """Every step's input projection and both biases: one packed product (not a product and an add)."""
    if K.linear_packed is None:
        pytest.skip("no AVX2 or AVX-512: the projection stays ggml's product")
    proto, feeds = lstm_model(*case)
    want = ReferenceEvaluator(proto).run(None, feeds)
    m, got = run(proto, feeds, 2)
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=2e-6)
    nd = 2 if case[4] == "bidirectional" else 1
    assert kernel_names(m).count("ggmlpy.linear") == nd
    plan = next(iter(m._plans.values()))
    assert not any(lib.ggml_graph_node(plan.graph, i).op == lib.GGML_OP_MUL_MAT for i in range(plan.n_nodes))


@needs_rnn
@pytest.mark.parametrize("T_,I,H,one_thread", [(50, 16, 32, True),    # the recurrence holds the work
                                               (2, 512, 8, False)])   # the projection does: threads split it
def test_sequence_bound_graphs_run_on_one_thread(T_, I, H, one_thread):
    """A graph whose multiply-adds are mostly in the LSTM's one-task nodes computes on a one-thread
    backend of the model's (ggml's other threads would only wait and spin), with the same numbers."""
    proto, feeds = lstm_model(T_, 1, I, H)
    want = ReferenceEvaluator(proto).run(None, feeds)
    m, got = run(proto, feeds, 2)
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=2e-6)
    plan = next(iter(m._plans.values()))
    assert (plan.compute_on is not None) == one_thread
    if one_thread:
        assert m.single_thread_cpu().n_threads == 1 and m.cpu.n_threads == 2
