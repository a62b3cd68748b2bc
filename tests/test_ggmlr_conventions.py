"""ggmlR's calling conventions in the ag_* API, beyond what the ported testthat files check:
named parameter lists, previous-setting returns, the dataloader's iterator, ag_gradcheck's two forms,
model_fn saving, dp_train and the cosine schedule's options, including the refusals."""
import numpy as np
import pytest

import ggmlpy as g


def test_param_list_is_a_list_that_answers_by_name():
    model = g.ag_sequential(g.ag_linear(3, 2), g.ag_linear(2, 1))
    p = model.parameters()
    assert isinstance(p, list) and len(p) == 4 and p.keys() == ["layer1_W", "layer1_b", "layer2_W", "layer2_b"]
    assert p["layer2_W"] is p[2] and "layer1_b" in p and "nope" not in p
    assert p[0] in p and g.ag_param(np.ones((2, 3))) not in p  # membership by identity, not by value
    with pytest.raises(KeyError, match="layer1_W"):
        p["W"]
    both = p + p  # R's c(): a plain list
    assert len(both) == 8
    opt = g.optimizer_adam(p)
    assert opt.params.keys() == p.keys() and opt.params["layer1_W"] is p[0]
    assert g.optimizer_sgd([p[0], p[1]]).params.names() is None  # an unnamed list stays unnamed


def test_ag_device_and_ag_dtype_return_the_previous_setting_and_restore():
    assert g.ag_device() == "cpu" and g.ag_default_dtype() == "f32"
    prev = g.ag_device("cpu")
    assert prev == "cpu"
    assert g.ag_dtype("f16") == "f32" and g.ag_default_dtype() == "f16"
    assert g.ag_tensor(np.ones((2, 2))).dtype == "f16"
    assert g.ag_dtype("f32") == "f16"
    with pytest.raises(g.GGMLError, match="ag_dtype"):
        g.ag_dtype("f64")
    assert g.ag_default_dtype() == "f32"  # a refused switch changes nothing


def test_dataloader_iterator_hands_out_complete_batches_and_refuses_past_the_end():
    x = np.arange(10.0).reshape(1, 10)
    dl = g.ag_dataloader(x, np.arange(10) % 3, batch_size=4, shuffle=False)
    assert dl.n_batches() == 2 and len(dl) == 3  # ggmlR's methods: complete batches; `for`: all samples
    xb, yb = dl.next_batch()
    assert xb.shape == (1, 4) and yb.shape == (1, 4) and dl.next_batch()["x"].data[0, 0] == 4
    assert not dl.has_next()
    with pytest.raises(g.GGMLError, match="reset"):
        dl.next_batch()
    assert [b.x.ncol for b in dl] == [4, 4, 2]
    dl.reset()
    assert dl.has_next() and len(dl.epoch()) == 2


def test_ag_gradcheck_forms_printing_and_a_wrong_gradient(capsys):
    W = g.ag_param(np.random.default_rng(0).uniform(0.5, 1.5, size=(2, 3)))
    assert g.ag_gradcheck(lambda: g.ag_sum(g.ag_mul(W, W)), [W])  # list form: silent
    assert capsys.readouterr().out == ""
    assert g.ag_gradcheck(lambda ins: g.ag_sum(g.ag_mul(ins["W"], ins["W"])), {"W": W}, verbose=True)
    out = capsys.readouterr().out
    assert "[gradcheck] 'W': max_err" in out and "PASS" in out and "analytical" in out
    # the constant copy hides half the dependence on W from the tape: the check must fail
    ok, errors = g.ag_gradcheck(lambda ins: g.ag_sum(g.ag_mul(g.ag_tensor(ins["W"].data), ins["W"])), {"W": W},
                                quiet=True, return_errors=True)
    assert not ok and errors[W.id] > 0.4
    with pytest.raises(g.GGMLError, match="ag tensors"):
        g.ag_gradcheck(lambda ins: g.ag_sum(ins["W"]), {"W": np.ones((2, 2))})


def _builder():
    return g.ag_sequential(g.ag_linear(2, 3))


def test_model_fn_is_saved_by_name_and_code_is_refused(tmp_path):
    m = _builder()
    with pytest.raises(g.GGMLError, match="module-level"):
        g.ag_save_model(m, tmp_path / "a.gguf", model_fn=lambda: _builder())
    g.ag_save_model(m, tmp_path / "b.gguf", model_fn=_builder)
    back = g.ag_load_model(tmp_path / "b.gguf")
    assert not back.training  # loaded for inference, as in ggmlR
    np.testing.assert_array_equal(back.layers[0].W.numpy(), m.layers[0].W.numpy())
    with pytest.raises(g.GGMLError, match="ag_sequential or ag_\\* layer"):
        g.ag_load_model(tmp_path / "b.gguf", model_fn=lambda: [1, 2])
    assert g.ag_load_model(_builder(), tmp_path / "b.gguf") == {}  # the old form: into a built model


def test_dp_train_over_listed_devices_and_its_refusals():
    rng = np.random.default_rng(0)
    data = [rng.normal(size=(2, 1)) for _ in range(6)]

    def make_model():
        return g.ag_linear(2, 2)

    res = g.dp_train(make_model, data, loss_fn=lambda out, tgt: g.ag_mse_loss(out, tgt), n_iter=5,
                     lr=1e-2, verbose=False, devices=["cpu", "cpu"])
    assert len(res["loss_history"]) == 5 and isinstance(res["model"], g.ag_linear)
    assert list(res["params"].keys()) == ["W", "b"]
    with pytest.raises(g.GGMLError, match="n_gpu"):
        g.dp_train(make_model, data, n_gpu=0)
    with pytest.raises(g.GGMLError, match="2 devices for 3"):
        g.dp_train(make_model, data, n_gpu=3, devices=["cpu", "cpu"])
    with pytest.raises(g.GGMLError, match="\\[1, 1\\] ag tensor"):
        g.dp_train(make_model, data, n_iter=1, verbose=False)  # no loss_fn: the output must be the loss


def _dp_losses(devices):
    g.manual_seed(0)
    rng = np.random.default_rng(0)
    data = [rng.normal(size=(2, 1)) for _ in range(8)]
    res = g.dp_train(lambda: g.ag_linear(2, 2), data, loss_fn=lambda out, tgt: g.ag_mse_loss(out, tgt), n_iter=6,
                     lr=1e-2, verbose=False, devices=devices)
    return np.array(res["loss_history"])


def test_dp_train_with_a_replica_on_each_test_device(device, tol):
    """Data-parallel training with one replica on the CPU and one on the test device (lavapipe in
    CI's Vulkan stage) gives the losses of two CPU replicas."""
    want = _dp_losses(["cpu", "cpu"])
    got = _dp_losses(["cpu", device])
    assert len(got) == 6 and np.isfinite(got).all()
    np.testing.assert_allclose(got, want, **tol)


def test_cosine_schedule_options_and_seed_refusals():
    opt = g.optimizer_sgd([g.ag_param(np.ones((1, 1)))], lr=0.1)
    with pytest.raises(g.GGMLError, match="choose one"):
        g.lr_scheduler_cosine(opt, T_max=5, restart=True, hold=False)
    with pytest.raises(g.GGMLError, match="lr_min"):
        g.lr_scheduler_cosine(opt, T_max=5, lr_min=0.5)
    sched = g.lr_scheduler_cosine(opt, T_max=4, eta_min=0.02)
    assert sched.lr_min == sched.eta_min == 0.02 and sched.lr_max == 0.1
    for bad in (True, "7", 1.5):
        with pytest.raises(g.GGMLError, match="single"):
            g.ggml_set_seed(bad)
    assert g.ggml_set_seed(np.int64(3)) == 3 and g.ggml_set_seed([4]) == 4
