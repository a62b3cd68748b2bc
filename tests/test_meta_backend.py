"""ggml_backend_meta_device: ggml's meta backend (tensor parallelism) over real devices.

A matmul whose weight or input is split by rows, columns or the shared dim across two or three
CPU devices (and CPU + lavapipe with GGMLPY_SOFTWARE_VULKAN=1) equals numpy; every answer of the
split function, graph and data access that ggml's meta backend would abort on raises first."""
import gc
import warnings

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy import GGMLError
from ggmlpy.bindings import lib

CPU = g.ggml_backend_dev_by_type(g.ggml_backend_device_type_cpu())
VULKAN = g.ggml_backend_dev_by_name("Vulkan0")


def _weights(devs, split, shapes, seed=0):
    """A backend on a meta device over `devs`, with the named f32 tensors (ggml ne) set to random data."""
    meta = g.ggml_backend_meta_device(devs, split)
    be = g.ggml_backend_dev_init(meta)
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    ts = {}
    for name, ne in shapes.items():
        ts[name] = getattr(g, f"ggml_new_tensor_{len(ne)}d")(ctx, g.GGML_TYPE_F32, *ne)
        g.ggml_set_name(ts[name], name)
    g.ggml_backend_alloc_ctx_tensors(ctx, be)
    rng = np.random.default_rng(seed)
    data = {n: rng.standard_normal(tuple(reversed(ne))).astype(np.float32) for n, ne in shapes.items()}
    for n, t in ts.items():
        g.ggml_backend_tensor_set_data(t, data[n])
    return meta, be, ctx, ts, data


def _compute(be, build):
    cctx = g.ggml_init(1 << 20, no_alloc=True)
    out = build(cctx)
    gf = g.ggml_build_forward_expand(cctx, out)
    galloc = g.ggml_gallocr_new(be)
    g.ggml_gallocr_alloc_graph(galloc, gf)
    g.ggml_backend_graph_compute(be, gf)
    return out, cctx, galloc


def _matmul(devs, split, K=12, M=10, N=7, then=None):
    meta, be, ctx, ts, d = _weights(devs, split, {"W": (K, M), "X": (K, N)})
    def build(c):
        y = g.ggml_mul_mat(c, ts["W"], ts["X"])
        return then(c, y) if then else y
    y, *_ = _compute(be, build)
    return meta, g.ggml_backend_tensor_get_data(y).reshape(N, M), d["X"] @ d["W"].T


@pytest.mark.parametrize("n_devs", [1, 2, 3])
@pytest.mark.parametrize("split", [{"W": 1}, {"X": 1}, {"W": 1, "X": "mirrored"}], ids=["rows", "cols", "rows2"])
def test_matmul_split_by_rows_or_columns_equals_numpy(n_devs, split):
    meta, y, ref = _matmul([CPU] * n_devs, split)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    assert meta.split_error is None
    name = next(iter(split))
    st = next(s for s in meta.states.values() if s.is_split)
    assert st.axis == 1 and sum(st.ne) == (10 if name == "W" else 7)  # all of ne1, shared out


def test_matmul_split_along_the_shared_dim_is_summed_across_devices():
    # both operands split along ne0 (K): each device has a partial product, ggml adds them up
    meta, y, ref = _matmul([CPU, CPU], {"W": 0, "X": 0}, then=lambda c, y: g.ggml_relu(c, y))
    np.testing.assert_allclose(y, np.maximum(ref, 0), rtol=1e-5, atol=1e-5)


def test_uneven_split_with_ggmlr_dict_and_explicit_ne():
    split = lambda info, n: {"axis": 1, "ne": [1, 6, 3], "n_segments": 1} if info["name"] == "W" else None  # noqa: E731
    meta, y, ref = _matmul([CPU] * 3, split)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    w_state = [s for s in meta.states.values() if s.is_split]
    assert w_state == [(1, (1, 6, 3), (1,))]


def test_a_device_may_get_an_empty_slice():
    meta, y, ref = _matmul([CPU, CPU], {"W": (1, [0, 10])})
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_batched_matmul_split_along_axis_2():
    meta, be, ctx, ts, d = _weights([CPU, CPU], {"A": 2, "B": 2}, {"A": (5, 4, 6), "B": (5, 3, 6)})
    y, *_ = _compute(be, lambda c: g.ggml_mul_mat(c, ts["A"], ts["B"]))
    got = g.ggml_backend_tensor_get_data(y).reshape(6, 3, 4)
    np.testing.assert_allclose(got, d["B"] @ d["A"].transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


def test_elementwise_and_bias_after_a_row_split():
    meta, be, ctx, ts, d = _weights([CPU, CPU], {"W": 1, "b": 0}, {"W": (8, 6), "X": (8, 5), "b": (6,)})
    y, *_ = _compute(be, lambda c: g.ggml_tanh(c, g.ggml_add(c, g.ggml_mul_mat(c, ts["W"], ts["X"]), ts["b"])))
    got = g.ggml_backend_tensor_get_data(y).reshape(5, 6)
    np.testing.assert_allclose(got, np.tanh(d["X"] @ d["W"].T + d["b"]), rtol=1e-5, atol=1e-5)


def test_split_tensor_round_trips_and_reads_whole_slices():
    meta, be, ctx, ts, d = _weights([CPU, CPU, CPU], {"W": 1, "V": 2}, {"W": (4, 7), "V": (3, 2, 5)})
    np.testing.assert_array_equal(g.ggml_backend_tensor_get_data(ts["W"]), d["W"].ravel())
    np.testing.assert_array_equal(g.ggml_get_f32(ts["V"]), d["V"])
    # whole rows (ne0 = 4 floats) of a tensor split along axis 1 can be read and written
    np.testing.assert_array_equal(g.ggml_backend_tensor_get_data(ts["W"], 16, 8), d["W"].ravel()[4:12])
    with pytest.raises(GGMLError, match="whole slices"):
        g.ggml_backend_tensor_set_data(ts["W"], [1.0], offset=4)
    with pytest.raises(GGMLError, match="whole slices"):
        g.ggml_get_f32_nd(ts["V"], 1, 1, 1)
    g.ggml_set_zero(ts["W"])
    assert not g.ggml_backend_tensor_get_data(ts["W"]).any()


def test_mirrored_tensor_allows_element_access():
    meta, be, ctx, ts, d = _weights([CPU, CPU], {}, {"W": (4, 3)})
    assert g.ggml_get_f32_nd(ts["W"], 2, 1) == pytest.approx(d["W"][1, 2])
    g.ggml_set_f32_nd(ts["W"], 2, 1, 0, 0, 5.0)
    assert g.ggml_backend_tensor_get_data(ts["W"])[6] == 5.0


def test_pythonic_split_forms():
    info = {"name": "w", "type": g.GGML_TYPE_F32, "ne": (8, 5, 1, 1), "op": 0, "flags": 0}
    ss = g.meta_backend.split_state
    assert ss(None, info, 2) == (10, (), (1,))
    assert ss("mirrored", info, 2).axis == g.GGML_BACKEND_SPLIT_AXIS_MIRRORED
    assert ss(1, info, 2) == (1, (3, 2), (1,))
    assert ss(0, info, 3) == (0, (3, 3, 2), (1,))
    assert ss((1, [5, 0]), info, 2) == (1, (5, 0), (1,))
    assert ss({"axis": 1, "ne": [1, 2], "n_segments": 2, "nr": [1, 2]}, info, 1).per_device(1) == [5]
    assert ss({"axis": 1, "ne": [2.0, 3.0], "n_segments": 1}, info, 2) == (1, (2, 3), (1,))
    assert ss("partial", info, 2) == (11, (0, 0), (1,))
    q4 = dict(info, type=g.GGML_TYPE_Q4_0, ne=(96, 2, 1, 1))
    assert ss(0, q4, 2) == (0, (64, 32), (1,))  # whole 32-value blocks


@pytest.mark.parametrize("spec, match", [
    ({"axis": 1, "ne": [2, 2]}, "do not match"),
    ({"axis": 1, "ne": [5]}, "entries"),
    ({"axis": 1, "ne": [6, -1]}, "non-negative"),
    ({"axis": 3}, "axis 3"),
    ({"axis": 98}, "not 0..2"),
    ({"axis": 99}, "not 0..2"),
    ({"ne": [5, 0]}, "no 'axis'"),
    ({"axis": 1, "bogus": 1}, "unknown fields"),
    ({"axis": 1, "n_segments": 17, "ne": [0] * 34}, "n_segments"),
    ({"axis": 1, "n_segments": 2, "ne": [1, 1, 1, 2], "nr": [0, 1]}, "repeat counts"),
    ({"axis": 1, "ne": [2.5, 2.5]}, "whole numbers"),
    ("sideways", "unknown split axis"),
    (True, "must be a number"),
])
def test_invalid_split_answers_raise(spec, match):
    info = {"name": "w", "type": g.GGML_TYPE_F32, "ne": (8, 5, 1, 1), "op": 0, "flags": 0}
    with pytest.raises(GGMLError, match=match):
        g.meta_backend.split_state(spec, info, 2)


def test_block_granularity_and_partial_type_are_checked():
    q4 = {"name": "q", "type": g.GGML_TYPE_Q4_0, "ne": (64, 2, 1, 1), "op": 0, "flags": 0}
    with pytest.raises(GGMLError, match="multiples of 32"):
        g.meta_backend.split_state({"axis": 0, "ne": [16, 48]}, q4, 2)
    with pytest.raises(GGMLError, match="f32"):
        g.meta_backend.split_state("partial", q4, 2)


def test_an_invalid_answer_mirrors_from_then_on_with_a_warning():
    calls = []

    def split(info, n):
        calls.append(info["name"])
        return {"axis": 1, "ne": [1, 1]}  # does not add up to ne1: ggml would abort

    with pytest.warns(RuntimeWarning, match="do not match"):
        meta, y, ref = _matmul([CPU, CPU], split)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)  # mirrored: still the right numbers
    assert isinstance(meta.split_error, GGMLError)
    assert calls == ["W"]  # sticky: not asked again
    assert all(s.axis == g.GGML_BACKEND_SPLIT_AXIS_MIRRORED for s in meta.states.values())


def test_constructor_checks_its_arguments():
    with pytest.raises(GGMLError, match="list"):
        g.ggml_backend_meta_device(CPU, {})
    with pytest.raises(GGMLError, match=r"\[1, 16\]"):
        g.ggml_backend_meta_device([CPU] * 17, {})
    with pytest.raises(GGMLError, match="Device"):
        g.ggml_backend_meta_device([CPU, "CPU"], {})
    with pytest.raises(GGMLError, match="split_fn"):
        g.ggml_backend_meta_device([CPU], 3)
    meta = g.ggml_backend_meta_device([CPU], {})
    with pytest.raises(GGMLError, match="another meta device"):
        g.ggml_backend_meta_device([meta], {})


def test_the_device_is_a_ggml_device():
    meta = g.ggml_backend_meta_device([CPU, CPU], {})
    assert meta.name == g.ggml_backend_dev_name(meta) == "Meta(CPU,CPU)"
    assert g.ggml_backend_dev_type(meta) == int(lib.GGML_BACKEND_DEVICE_TYPE_META)
    mem = g.ggml_backend_dev_memory(meta)
    assert mem["total"] == 2 * g.ggml_backend_dev_memory(CPU)["total"]
    assert g.ggml_backend_dev_get_props(meta)["type"] == int(lib.GGML_BACKEND_DEVICE_TYPE_META)
    be = g.ggml_backend_dev_init(meta)
    assert be.name == "Meta(CPU,CPU)" and g.ggml_backend_get_device(be) is meta
    assert g.ggml_backend_meta_split_axis_name(g.GGML_BACKEND_SPLIT_AXIS_PARTIAL) == "PARTIAL"
    assert g.ggml_backend_meta_split_axis_name(2) == "2"
    with pytest.raises(GGMLError):
        g.ggml_backend_meta_split_axis_name(7)


def test_the_callback_outlives_the_python_handle():
    meta = g.ggml_backend_meta_device([CPU, CPU], lambda info, n: 1 if info["name"] == "W" else None)
    be = g.ggml_backend_dev_init(meta)
    del meta
    gc.collect()
    ctx = g.ggml_init(1 << 16, no_alloc=True)
    w = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 3, 4)
    g.ggml_set_name(w, "W")
    g.ggml_backend_alloc_ctx_tensors(ctx, be)  # ggml calls the split function now
    g.ggml_backend_tensor_set_data(w, np.arange(12))
    np.testing.assert_array_equal(g.ggml_backend_tensor_get_data(w), np.arange(12))


def test_partial_sums_cannot_be_read_back_but_an_op_after_them_can():
    meta, be, ctx, ts, d = _weights([CPU, CPU], {"W": 0, "X": 0}, {"W": (6, 4), "X": (6, 3)})
    y, *_ = _compute(be, lambda c: g.ggml_mul_mat(c, ts["W"], ts["X"]))
    with pytest.raises(GGMLError, match="partial sums"):
        g.ggml_backend_tensor_get_data(y)
    y2, *_ = _compute(be, lambda c: g.ggml_scale(c, g.ggml_mul_mat(c, ts["W"], ts["X"]), 1.0))
    np.testing.assert_allclose(g.ggml_backend_tensor_get_data(y2).reshape(3, 4), d["X"] @ d["W"].T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("split, build, match", [
    ({"W": 0}, lambda c, t: g.ggml_mul_mat(c, t["W"], t["X"]), "cannot multiply src0 split along axis 0"),
    ({"W": 1, "X": 1}, lambda c, t: g.ggml_mul_mat(c, t["W"], t["X"]), "cannot multiply"),
    ({"W": (0, [6, 0]), "X": (0, [6, 0])}, lambda c, t: g.ggml_mul_mat(c, t["W"], t["X"]), "every device needs"),
    ({"W": 1}, lambda c, t: g.ggml_soft_max(c, t["W"]), "no split-state rule"),
    ({"W": 0}, lambda c, t: g.ggml_sum_rows(c, t["W"]), "per-row op"),
    ({"W": 1}, lambda c, t: g.ggml_sum(c, t["W"]), "needs its source whole"),
    ({"W": 1}, lambda c, t: g.ggml_transpose(c, t["W"]), "view or reshape"),
    ({"W": 1, "V": 0}, lambda c, t: g.ggml_add(c, t["W"], t["V"]), "split differently"),
    ({"P": "partial"}, lambda c, t: g.ggml_relu(c, t["P"]), "partial sums"),
])
def test_graphs_ggml_would_abort_on_are_refused(split, build, match):
    meta, be, ctx, ts, d = _weights([CPU, CPU], split, {"W": (6, 4), "X": (6, 3), "V": (6, 4), "P": (6, 4)})
    cctx = g.ggml_init(1 << 20, no_alloc=True)
    gf = g.ggml_build_forward_expand(cctx, build(cctx, ts))
    with pytest.raises(GGMLError, match=match):
        g.ggml_gallocr_alloc_graph(g.ggml_gallocr_new(be), gf)
    with pytest.raises(GGMLError, match=match):
        g.ggml_backend_graph_compute(be, gf)


def test_other_entry_points_refuse_meta_tensors():
    meta, be, ctx, ts, d = _weights([CPU, CPU], {"W": 1}, {"W": (6, 4)})
    with pytest.raises(GGMLError, match="meta device"):
        g.ggml_backend_tensor_get_async(be, ts["W"])
    with pytest.raises(GGMLError, match="meta device"):
        g.ggml_backend_sched_new([be])
    ctx2 = g.ggml_init(1 << 16, no_alloc=True)
    a = g.ggml_new_tensor_2d(ctx2, g.GGML_TYPE_F32, 4, 4)
    g.ggml_view_1d(ctx2, a, 4, 0)
    with pytest.raises(GGMLError, match="views"):
        g.ggml_backend_alloc_ctx_tensors(ctx2, be)
    # a tensor of an ordinary CPU buffer in a meta graph
    cpu_be = g.ggml_backend_cpu_init()
    ctx3 = g.ggml_init(1 << 16, no_alloc=True)
    x = g.ggml_new_tensor_2d(ctx3, g.GGML_TYPE_F32, 6, 2)
    g.ggml_backend_alloc_ctx_tensors(ctx3, cpu_be)
    cctx = g.ggml_init(1 << 20, no_alloc=True)
    gf = g.ggml_build_forward_expand(cctx, g.ggml_mul_mat(cctx, ts["W"], x))
    with pytest.raises(GGMLError, match="not in a buffer of this meta device"):
        g.ggml_gallocr_alloc_graph(g.ggml_gallocr_new(be), gf)


@pytest.mark.skipif(VULKAN is None, reason="no Vulkan device (set GGMLPY_SOFTWARE_VULKAN=1 for lavapipe)")
@pytest.mark.parametrize("split", [{"W": 1}, {"X": 1}, {"W": 0, "X": 0}], ids=["rows", "cols", "shared"])
def test_matmul_over_cpu_and_vulkan_equals_numpy(split):
    # ggml's Vulkan matmul rounds src1 to f16: tolerance as in the other Vulkan tests
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        meta, y, ref = _matmul([CPU, VULKAN], split, K=64, M=40, N=24, then=lambda c, y: g.ggml_scale(c, y, 1.0))
    assert meta.name == "Meta(CPU,Vulkan0)"
    np.testing.assert_allclose(y, ref, rtol=2e-2, atol=2e-2)
