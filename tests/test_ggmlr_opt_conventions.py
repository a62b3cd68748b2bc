"""ggmlR's calling conventions of ggml's training API and scheduler, beyond its own tests:
contexts without static graphs (ggml_opt_prepare_alloc), the tensor form of get_batch, ggmlR's
five-argument epoch callbacks, the auto-added CPU backend and alloc-then-fill scheduling."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.bindings import lib
from ggmlpy.errors import GGMLError

XS = np.linspace(-1, 1, 8, dtype=np.float32)


def weight(cpu, value=0.1):
    ctx_w = g.ggml_init(1 << 20, no_alloc=True)
    w = g.ggml_new_tensor_2d(ctx_w, g.GGML_TYPE_F32, 1, 1)
    g.ggml_set_param(w)
    buf = g.ggml_backend_alloc_ctx_tensors(ctx_w, cpu)
    g.ggml_backend_tensor_set(w, np.array([[value]], np.float32))
    return w, (ctx_w, buf)


def step_graph(w, batch=8, mem=16 << 20):
    ctx = g.ggml_init(mem, no_alloc=True)
    inp = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 1, batch)
    lib.ggml_set_input(inp.ptr)
    out = g.ggml_mul_mat(ctx, w, inp)
    return ctx, inp, out, g.ggml_build_forward_expand(ctx, out)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_context_without_static_graphs_trains_step_by_step(optimizer):
    cpu = g.ggml_backend_cpu_init()
    sched = g.ggml_backend_sched_new([cpu])
    kind = g.ggml_opt_optimizer_type_sgd() if optimizer == "sgd" else g.ggml_opt_optimizer_type_adamw()
    opt = g.ggml_opt_init(sched, g.ggml_opt_loss_type_mse(), kind, 1)       # ggmlR's positional form
    assert not g.ggml_opt_static_graphs(opt)
    g.ggml_opt_set_lr(opt, 0.5 if optimizer == "sgd" else 0.05)
    w, _keep = weight(cpu)
    res = g.ggml_opt_result_init()
    for _ in range(150):
        ctx, inp, out, gf = step_graph(w)
        g.ggml_opt_prepare_alloc(opt, ctx, gf, inp, out)
        g.ggml_opt_alloc(opt, True)
        g.ggml_backend_tensor_set(inp, XS.reshape(8, 1))
        g.ggml_backend_tensor_set(g.ggml_opt_labels(opt), 2 * XS.reshape(8, 1))
        g.ggml_opt_result_reset(res)
        g.ggml_opt_eval(opt, res)
    # without clearing ggml's accumulators each step, SGD ends near 3 (every step re-adds old gradients)
    np.testing.assert_allclose(g.ggml_backend_tensor_get(w).ravel(), [2.0], atol=2e-3)
    assert g.ggml_opt_result_loss(res).loss < 1e-5


def test_prepare_alloc_and_its_misuse_raise_before_ggml():
    cpu = g.ggml_backend_cpu_init()
    sched = g.ggml_backend_sched_new([cpu])
    opt = g.ggml_opt_init(sched, loss_type=g.ggml_opt_loss_type_mse())
    w, _keep = weight(cpu)
    with pytest.raises(GGMLError, match="prepare_alloc"):
        g.ggml_opt_alloc(opt, True)
    assert g.ggml_opt_labels(opt) is None                              # no graph yet
    ctx, inp, out, gf = step_graph(w)
    with pytest.raises(GGMLError, match="end with outputs"):
        g.ggml_opt_prepare_alloc(opt, ctx, gf, inp, inp)
    small, sinp, sout, sgf = step_graph(w, mem=g.ggml_tensor_overhead() * 4 + g.ggml_graph_overhead())
    with pytest.raises(GGMLError, match="bytes free"):
        g.ggml_opt_prepare_alloc(opt, small, sgf, sinp, sout)
    host = g.ggml_init(1 << 20)
    with pytest.raises(GGMLError, match="no_alloc"):
        g.ggml_opt_prepare_alloc(opt, host, gf, inp, out)
    ds = g.ggml_opt_dataset_init(g.GGML_TYPE_F32, g.GGML_TYPE_F32, 1, 1, 8)
    with pytest.raises(GGMLError, match="static graphs"):
        g.ggml_opt_epoch(opt, ds)
    static_ctx, s_inp, s_out, _ = step_graph(w)
    g.ggml_backend_alloc_ctx_tensors(static_ctx, cpu)
    static = g.ggml_opt_init(sched, static_ctx, s_inp, s_out, g.ggml_opt_loss_type_mse())
    with pytest.raises(GGMLError, match="without static graphs"):
        g.ggml_opt_prepare_alloc(static, ctx, gf, inp, out)
    with pytest.raises(GGMLError, match="either"):
        g.ggml_opt_init(sched, g.ggml_opt_loss_type_mse(), loss_type=g.ggml_opt_loss_type_sum())


def test_get_batch_into_tensors_checks_them():
    cpu = g.ggml_backend_cpu_init()
    ds = g.ggml_opt_dataset_init(g.GGML_TYPE_F32, g.GGML_TYPE_F32, 3, 2, 6)
    g.ggml_opt_dataset_data(ds)[:] = np.arange(18).reshape(6, 3)
    g.ggml_opt_dataset_labels(ds)[:] = np.arange(12).reshape(6, 2)
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    d = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 3, 2)
    lab = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 2, 2)
    bad_lab = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 2, 3)
    with pytest.raises(GGMLError, match="allocated"):
        g.ggml_opt_dataset_get_batch(ds, d, lab, 0)
    g.ggml_backend_alloc_ctx_tensors(ctx, cpu)
    g.ggml_opt_dataset_get_batch(ds, d, lab, 2)                         # samples 4 and 5
    np.testing.assert_array_equal(g.ggml_backend_tensor_get_data(d), np.arange(12, 18))
    np.testing.assert_array_equal(g.ggml_backend_tensor_get_data(lab), np.arange(8, 12))
    with pytest.raises(GGMLError, match="labels_batch tensor too"):   # ggml would abort
        g.ggml_opt_dataset_get_batch(ds, data_batch=d, labels_batch=None, ibatch=0)
    g.ggml_opt_dataset_get_batch(ds, data_batch=d, labels_batch=lab, ibatch=0)
    np.testing.assert_array_equal(g.ggml_backend_tensor_get_data(d), np.arange(6))
    unlabeled = g.ggml_opt_dataset_init(g.GGML_TYPE_F32, g.GGML_TYPE_F32, 3, 0, 6)
    with pytest.raises(GGMLError, match="no labels"):
        g.ggml_opt_dataset_get_batch(unlabeled, d, lab, 0)
    g.ggml_opt_dataset_get_batch(unlabeled, d, None, 1)
    with pytest.raises(GGMLError, match="outside"):
        g.ggml_opt_dataset_get_batch(ds, d, lab, 3)
    with pytest.raises(GGMLError, match="labels_batch"):
        g.ggml_opt_dataset_get_batch(ds, d, bad_lab, 0)
    xb, yb = g.ggml_opt_dataset_get_batch(ds, 2, 1)                     # ggmlpy's own form still works
    np.testing.assert_array_equal(xb, [[6, 7, 8], [9, 10, 11]])


def test_epoch_callbacks_with_ggmlr_five_arguments():
    cpu = g.ggml_backend_cpu_init()
    sched = g.ggml_backend_sched_new([cpu])
    w, _keep = weight(cpu)
    ctx, inp, out, _ = step_graph(w)
    g.ggml_backend_alloc_ctx_tensors(ctx, cpu)
    opt = g.ggml_opt_init(sched, ctx, inp, out, g.ggml_opt_loss_type_mse(), g.ggml_opt_optimizer_type_sgd())
    ds = g.ggml_opt_dataset_init(g.GGML_TYPE_F32, g.GGML_TYPE_F32, 1, 1, 16)
    g.ggml_opt_dataset_data(ds)[:, 0] = np.tile(XS, 2)
    g.ggml_opt_dataset_labels(ds)[:, 0] = 2 * np.tile(XS, 2)
    seen = []

    def cb(train, ibatch, ibatch_max, t_start_us, result):
        seen.append((train, ibatch, ibatch_max, t_start_us > 0, g.ggml_opt_result_ndata(result)))
    res = g.ggml_opt_result_init()
    g.ggml_opt_epoch(opt, ds, res, None, -1, callback_train=cb)
    assert seen == [(True, 1, 2, True, 8), (True, 2, 2, True, 16)]


def test_a_scheduler_without_a_cpu_backend_last_gets_one():
    blas = next((d.name for d in g.devices() if d.name == "BLAS"), None)
    if blas is None:
        pytest.skip("no non-CPU backend in this build")
    sched = g.ggml_backend_sched_new([g.ggml_backend_init_by_name(blas)])
    assert g.ggml_backend_sched_get_n_backends(sched) == 2
    assert g.ggml_backend_name(g.ggml_backend_sched_get_backend(sched, 1)) == "CPU"


def test_alloc_graph_then_fill_the_leaves_then_compute():
    cpu = g.ggml_backend_cpu_init()
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    a = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, 5)
    b = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, 5)
    graph = g.ggml_build_forward_expand(ctx, g.ggml_mul(ctx, a, b))
    sched = g.ggml_backend_sched_new([cpu])
    with pytest.raises(GGMLError, match="not in a backend buffer"):   # nobody could have filled them
        g.ggml_backend_sched_graph_compute(sched, graph)
    assert g.ggml_backend_sched_alloc_graph(sched, graph)
    g.ggml_backend_tensor_set_data(a, np.arange(5.0))
    g.ggml_backend_tensor_set_data(b, np.full(5, 3.0))
    g.ggml_backend_sched_graph_compute(sched, graph)
    np.testing.assert_array_equal(g.ggml_backend_tensor_get_data(g.ggml_graph_node(graph, -1)), np.arange(5.0) * 3)


def test_outputs_without_a_trainable_parameter_are_refused():
    cpu = g.ggml_backend_cpu_init()
    sched = g.ggml_backend_sched_new([cpu])
    ctx = g.ggml_init(16 << 20, no_alloc=True)
    inp = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 2, 4)
    out = g.ggml_scale(ctx, inp, 2.0)
    gf = g.ggml_build_forward_expand(ctx, out)
    dyn = g.ggml_opt_init(sched, g.ggml_opt_loss_type_sum())
    with pytest.raises(GGMLError, match="trainable parameter"):      # ggml's backward pass would abort
        g.ggml_opt_prepare_alloc(dyn, ctx, gf, inp, out)
    g.ggml_backend_alloc_ctx_tensors(ctx, cpu)
    with pytest.raises(GGMLError, match="trainable parameter"):
        g.ggml_opt_init(sched, ctx, inp, out, g.ggml_opt_loss_type_sum())
