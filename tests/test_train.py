"""Training utilities: schedulers, the data loader, ag_fit and its callbacks, the fused optimizer
steps against numpy's formulas, memory over a long run, and a short digits run."""
import importlib.util
import math
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.optim import fused

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
rng = np.random.default_rng(7)


def dummy_optimizer(lr=0.1):
    return g.optimizer_sgd([g.ag_param(np.zeros((1, 1)))], lr=lr)


# -- learning-rate schedulers --------------------------------------------------------------------------------
def lr_sequence(sched, n):
    out = [sched.get_lr()]
    for _ in range(n):
        sched.step()
        out.append(sched.get_lr())
    return out


def test_step_scheduler_matches_closed_form():
    opt = dummy_optimizer(0.1)
    seq = lr_sequence(g.lr_scheduler_step(opt, step_size=3, gamma=0.5), 10)
    np.testing.assert_allclose(seq, [0.1 * 0.5 ** (e // 3) for e in range(11)], rtol=1e-12)
    assert opt.lr == seq[-1]


def test_cosine_scheduler_matches_closed_form():
    opt = dummy_optimizer(0.1)
    seq = lr_sequence(g.lr_scheduler_cosine(opt, T_max=5, eta_min=0.01, hold=False), 12)  # PyTorch's form
    expect = [0.01 + 0.09 * (1 + math.cos(math.pi * e / 5)) / 2 for e in range(13)]
    np.testing.assert_allclose(seq, expect, rtol=1e-12)
    assert seq[5] == pytest.approx(0.01) and seq[10] == pytest.approx(0.1)
    held = lr_sequence(g.lr_scheduler_cosine(dummy_optimizer(0.1), T_max=5, lr_min=0.01), 12)  # ggmlR's default
    np.testing.assert_allclose(held, expect[:6] + [0.01] * 7, rtol=1e-12)
    restarts = lr_sequence(g.lr_scheduler_cosine(dummy_optimizer(0.1), T_max=5, lr_min=0.01, restart=True), 12)
    np.testing.assert_allclose(restarts, expect[:6] + expect[1:6] + expect[1:3], rtol=1e-12)


def test_schedulers_match_pytorch():
    torch = pytest.importorskip("torch", reason="compares with PyTorch: pip install torch==2.13.0 "
                                        "--index-url https://download.pytorch.org/whl/cpu")
    for ours_cls, theirs_cls, kw in ((g.lr_scheduler_step, torch.optim.lr_scheduler.StepLR,
                                      {"step_size": 2, "gamma": 0.3}),
                                     (g.lr_scheduler_cosine, torch.optim.lr_scheduler.CosineAnnealingLR,
                                      {"T_max": 4, "eta_min": 0.001, "hold": False})):
        opt_t = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.05)
        sched_t = theirs_cls(opt_t, **{k: v for k, v in kw.items() if k != "hold"})
        theirs = [opt_t.param_groups[0]["lr"]]
        for _ in range(9):
            opt_t.step()
            sched_t.step()
            theirs.append(opt_t.param_groups[0]["lr"])
        np.testing.assert_allclose(lr_sequence(ours_cls(dummy_optimizer(0.05), **kw), 9), theirs, rtol=1e-9)


def test_scheduler_arguments_are_checked():
    with pytest.raises(g.GGMLError, match="step_size"):
        g.lr_scheduler_step(dummy_optimizer(), step_size=0)
    with pytest.raises(g.GGMLError, match="T_max"):
        g.lr_scheduler_cosine(dummy_optimizer(), T_max=0)


def test_scheduler_state_round_trip():
    opt = dummy_optimizer(0.2)
    s = g.lr_scheduler_step(opt, 2, 0.1)
    for _ in range(5):
        s.step()
    opt2 = dummy_optimizer(0.2)
    s2 = g.lr_scheduler_step(opt2, 2, 0.1)
    s2.load_state_dict(s.state_dict())
    assert opt2.lr == pytest.approx(opt.lr) and s2.last_epoch == 5


# -- ag_dataloader ----------------------------------------------------------------------------------------------
def test_dataloader_batches_cover_every_column_once():
    x = rng.normal(size=(3, 10))
    y = np.arange(10) % 4
    g.manual_seed(1)
    loader = g.ag_dataloader(x, y, batch_size=4)
    assert len(loader) == 3
    batches = list(loader)
    assert [b[0].shape for b in batches] == [(3, 4), (3, 4), (3, 2)]
    assert [b[1].shape for b in batches] == [(1, 4), (1, 4), (1, 2)]
    xs = np.concatenate([b[0].numpy() for b in batches], axis=1)
    ys = np.concatenate([b[1].numpy()[0] for b in batches]).astype(int)
    order = [int(np.argmin(np.abs(x - xs[:, [j]]).sum(axis=0))) for j in range(10)]
    assert sorted(order) == list(range(10))                       # each sample exactly once
    np.testing.assert_allclose(xs, x[:, order], rtol=1e-6)        # columns kept whole
    np.testing.assert_array_equal(ys, y[order])                   # labels follow their samples
    assert order != list(range(10))                               # and shuffled


def test_dataloader_drop_last_and_no_shuffle():
    x = rng.normal(size=(2, 10))
    loader = g.ag_dataloader(x, None, batch_size=4, shuffle=False, drop_last=True)
    assert len(loader) == 2
    batches = [xb.numpy() for xb, yb in loader]
    assert len(batches) == 2
    np.testing.assert_allclose(np.concatenate(batches, axis=1), x[:, :8], rtol=1e-6)


def test_dataloader_shuffles_each_epoch_from_the_seed():
    x = np.arange(12.0).reshape(1, 12)

    def epochs(seed):
        g.manual_seed(seed)
        loader = g.ag_dataloader(x, None, batch_size=12)
        return [next(iter(loader))[0].numpy()[0].tolist() for _ in range(2)]

    first, again = epochs(5), epochs(5)
    assert first == again                 # manual_seed makes it reproducible
    assert first[0] != first[1]           # a new order every epoch


def test_dataloader_labels_are_softmax_ce_targets():
    x = rng.normal(size=(5, 6))
    y = np.array([0, 2, 1, 2, 0, 1])
    logits = g.ag_tensor(rng.normal(size=(3, 6)))
    (xb, yb), = list(g.ag_dataloader(x, y, batch_size=6, shuffle=False))
    a = g.ag_softmax_cross_entropy_loss(logits, yb).item()
    b = g.ag_softmax_cross_entropy_loss(logits, y).item()
    assert a == b


def test_dataloader_matrix_targets_and_ag_tensor_input():
    x = g.ag_tensor(rng.normal(size=(3, 7)))
    y = rng.normal(size=(2, 7))
    batches = list(g.ag_dataloader(x, y, batch_size=7, shuffle=False))
    np.testing.assert_allclose(batches[0][0].numpy(), x.numpy())
    np.testing.assert_allclose(batches[0][1].numpy(), y, rtol=1e-6)


def test_dataloader_real_valued_vector_targets_are_a_row():
    y = rng.normal(size=6)
    (xb, yb), = list(g.ag_dataloader(rng.normal(size=(2, 6)), y, batch_size=6, shuffle=False))
    assert yb.shape == (1, 6)
    np.testing.assert_allclose(yb.numpy()[0], y, rtol=1e-6)


def test_dataloader_batches_survive_the_next_tape():
    loader = g.ag_dataloader(rng.normal(size=(2, 8)), np.zeros(8, int), batch_size=4)
    xb, yb = next(iter(loader))
    before = xb.numpy()
    with g.with_grad_tape():  # resets the pass pool: a batch must not live there
        g.ag_sum(xb)
    np.testing.assert_array_equal(xb.numpy(), before)


def test_dataloader_errors():
    with pytest.raises(g.GGMLError, match="samples"):
        g.ag_dataloader(np.zeros((2, 5)), np.zeros(4, int))
    with pytest.raises(g.GGMLError, match="batch_size"):
        g.ag_dataloader(np.zeros((2, 5)), None, batch_size=0)
    with pytest.raises(g.GGMLError, match="matrix"):
        g.ag_dataloader(np.zeros(5), None)


# -- ag_fit -----------------------------------------------------------------------------------------------------
def blobs(n=200, seed=0):
    r = np.random.default_rng(seed)
    y = r.integers(0, 3, n)
    centers = np.array([[2.0, 0.0], [-2.0, 1.0], [0.0, -2.5]])
    return (centers[y] + 0.6 * r.normal(size=(n, 2))).T, y


def small_model(dropout=0.0):
    return g.ag_sequential(g.ag_linear(2, 16, "relu"), g.ag_dropout(dropout), g.ag_linear(16, 3))


def test_fit_history_and_learning():
    g.manual_seed(0)
    x, y = blobs()
    model = small_model(0.2)
    opt = g.optimizer_adam(model.parameters(), lr=0.02)
    sched = g.lr_scheduler_step(opt, step_size=2, gamma=0.5)
    hist = g.ag_fit(model, g.ag_softmax_cross_entropy_loss, opt, g.ag_dataloader(x, y, 32), epochs=6,
                    val_loader=g.ag_dataloader(x, y, 100, shuffle=False),
                    callbacks=[g.scheduler_step(sched)], progress=False, clip_grad=5.0)
    assert set(hist) == {"loss", "val_loss", "lr", "time"}
    assert all(len(v) == 6 for v in hist.values())
    assert hist["lr"] == pytest.approx([0.02, 0.02, 0.01, 0.01, 0.005, 0.005])
    assert hist["loss"][-1] < hist["loss"][0] / 2
    assert hist["val_loss"][-1] < 0.3
    assert model.training  # left in the mode it had
    # the recorded val_loss is the eval-mode loss (dropout off)
    last = g.ag_evaluate(model, g.ag_softmax_cross_entropy_loss, g.ag_dataloader(x, y, 100, shuffle=False))
    assert last == pytest.approx(hist["val_loss"][-1], rel=1e-6)


def _fit_losses(model_fn, compile, monkeypatch, epochs=3, clip_grad=None, seed=0):
    """ag_fit's losses from a fresh model, and how many of its steps ran eagerly (backward calls)."""
    from ggmlpy.train import fit as fit_mod
    eager = []
    monkeypatch.setattr(fit_mod, "backward", lambda loss: (eager.append(1), g.backward(loss))[1])
    g.manual_seed(seed)
    x, y = blobs(70)  # batches of 32, 32 and 6: two input shapes
    model = model_fn()
    hist = g.ag_fit(model, lambda p, t: g.ag_mse_loss(p, t), g.optimizer_adam(model.parameters(), lr=0.01),
                    g.ag_dataloader(x, np.eye(3)[y].T, 32), epochs=epochs, progress=False, clip_grad=clip_grad,
                    compile=compile)
    return hist["loss"], len(eager)


def test_fit_compiles_a_plain_model_with_the_same_losses(monkeypatch):
    want, eager_steps = _fit_losses(small_model, False, monkeypatch)
    assert eager_steps == 9
    got, eager_steps = _fit_losses(small_model, "auto", monkeypatch)
    assert eager_steps == 0
    np.testing.assert_allclose(got, want, rtol=1e-5)
    got, eager_steps = _fit_losses(small_model, True, monkeypatch)
    assert eager_steps == 0
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_fit_compiles_gradient_clipping_with_the_eager_losses(monkeypatch):
    """clip_grad is clipped inside the compiled graph (global norm, then the update)."""
    want, eager_steps = _fit_losses(small_model, False, monkeypatch, clip_grad=0.05)
    assert eager_steps == 9
    unclipped, _ = _fit_losses(small_model, False, monkeypatch)
    assert not np.allclose(want, unclipped, rtol=1e-3)  # the clip is active
    for mode in ("auto", True):
        got, eager_steps = _fit_losses(small_model, mode, monkeypatch, clip_grad=0.05)
        assert eager_steps == 0
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_fit_keeps_host_reads_eager_and_unchanged_and_compiles_dropout_and_checkpoints(monkeypatch):
    """A value read on the host may steer the model: "auto" runs it eagerly, and the failed trace
    leaves the random stream where it was, so the losses are exactly the eager ones. Dropout (its
    masks are inputs the compiled step draws each call) and checkpointed models compile and
    follow the eager losses."""
    class Checkpointed(g.ag_sequential):
        def forward(self, x):
            return g.ag_checkpoint(lambda t: g.ag_sequential.forward(self, t), x)
    class Peeks(g.ag_sequential):  # reads a value on the host: a compiled graph would freeze it
        def forward(self, x):
            h = g.ag_sequential.forward(self, x)
            return g.ag_scale(h, 2.0) if h.numpy().max() > 100 else h
    peeks = lambda: Peeks(g.ag_linear(2, 16, "relu"), g.ag_linear(16, 3))  # noqa: E731
    want, _ = _fit_losses(peeks, False, monkeypatch, epochs=2)
    got, eager_steps = _fit_losses(peeks, "auto", monkeypatch, epochs=2)
    assert eager_steps == 6 and got == want
    checkpointed = lambda: Checkpointed(g.ag_linear(2, 16, "relu"), g.ag_linear(16, 3))  # noqa: E731
    for model_fn, clip in [(lambda: small_model(0.3), None), (lambda: small_model(0.3), 1.0), (checkpointed, None)]:
        want, _ = _fit_losses(model_fn, False, monkeypatch, epochs=2, clip_grad=clip)
        got, eager_steps = _fit_losses(model_fn, "auto", monkeypatch, epochs=2, clip_grad=clip)
        assert eager_steps == 0
        np.testing.assert_allclose(got, want, rtol=1e-5)

    class MadeFromHostData(g.ag_sequential):  # a constant made inside the model: frozen into a graph
        def forward(self, x):
            return g.ag_mul(g.ag_sequential.forward(self, x), g.ag_tensor(np.full((3, 1), 2.0)))
    with pytest.raises(g.GGMLError, match="host data"):
        _fit_losses(lambda: MadeFromHostData(g.ag_linear(2, 3)), True, monkeypatch)
    with pytest.raises(g.GGMLError, match="compile must be"):
        _fit_losses(small_model, "yes", monkeypatch)


def test_fit_without_validation_has_no_val_loss():
    x, y = blobs(40)
    model = small_model()
    hist = g.ag_fit(model, g.ag_softmax_cross_entropy_loss, g.optimizer_sgd(model.parameters(), lr=0.1),
                    g.ag_dataloader(x, y, 16), epochs=2, progress=False)
    assert set(hist) == {"loss", "lr", "time"} and len(hist["loss"]) == 2


def test_early_stopping_stops_training():
    x, y = blobs(60)
    model = small_model()
    stopper = g.early_stopping(monitor="val_loss", patience=2, min_delta=1e9)  # nothing counts as better
    hist = g.ag_fit(model, g.ag_softmax_cross_entropy_loss, g.optimizer_sgd(model.parameters(), lr=0.05),
                    g.ag_dataloader(x, y, 30), epochs=10, val_loader=g.ag_dataloader(x, y, 60, shuffle=False),
                    callbacks=[stopper], progress=False)
    assert len(hist["loss"]) == 3  # the first epoch sets the best; two more without improvement
    assert stopper.stopped_epoch == 3 and stopper.best_epoch == 1


def test_early_stopping_logic_and_missing_monitor():
    cb = g.early_stopping(monitor="loss", patience=2, min_delta=0.1)
    hist = {"loss": []}
    decisions = []
    for v in [1.0, 0.8, 0.75, 0.72, 0.5, 0.45, 0.44]:
        hist["loss"].append(v)
        decisions.append(cb.on_epoch_end(len(hist["loss"]), hist))
    assert decisions == [False, False, False, True, False, False, True]
    assert cb.best == 0.5 and cb.best_epoch == 5
    with pytest.raises(g.GGMLError, match="val_loader"):
        g.early_stopping().on_epoch_end(1, {"loss": [1.0]})


def test_clip_grad_norm_against_numpy():
    rng = np.random.default_rng(4)
    a, b, unused = (g.ag_param(rng.normal(size=s)) for s in ((4, 3), (3, 1), (2, 2)))
    with g.with_grad_tape():
        loss = g.ag_sum(g.ag_mul(g.ag_matmul(a, g.ag_tensor(rng.normal(size=(3, 5)))), g.ag_tensor(rng.normal(size=(4, 5)))))
        loss = g.ag_add(loss, g.ag_sum(g.ag_mul(b, b)))
    grads = g.backward(loss)
    ga, gb = grads[a].numpy(), grads[b].numpy()
    want = np.sqrt((ga ** 2).sum() + (gb ** 2).sum())
    assert g.clip_grad_norm([a, b, unused], grads, want * 10) == pytest.approx(want, rel=1e-6)
    np.testing.assert_allclose(grads[a].numpy(), ga)  # under the limit: untouched
    assert g.clip_grad_norm([a, b, unused], grads, 0.5) == pytest.approx(want, rel=1e-6)
    scale = 0.5 / (want + 1e-6)
    np.testing.assert_allclose(grads[a].numpy(), ga * scale, rtol=1e-6)
    np.testing.assert_allclose(grads[b].numpy(), gb * scale, rtol=1e-6)
    assert g.clip_grad_norm([unused], grads, 1.0) == 0.0


# -- weight decay and the fused optimizer steps, against numpy ------------------------------------------------
def numpy_sgd(p, grads, lr, momentum, wd):
    v = np.zeros_like(p)
    for gr in grads:
        gr = gr + wd * p
        if momentum:
            v = momentum * v + gr
            gr = v
        p = p - lr * gr
    return p


def numpy_adam(p, grads, lr, b1, b2, eps, wd):
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, gr in enumerate(grads, 1):
        m = b1 * m + (1 - b1) * gr
        v = b2 * v + (1 - b2) * gr * gr
        upd = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        p = p - lr * (upd + wd * p)
    return p


def run_optimizer(make_opt, p0s, grad_seq, fused_path=True):
    params = [g.ag_param(p0) for p0 in p0s]
    opt = make_opt(params)
    opt._fused_ok = fused_path
    for grads in grad_seq:
        gm = g.GradMap()
        for p, gr in zip(params, grads):
            dict.__setitem__(gm, p.id, g.ag_tensor(gr))
        opt.step(gm)
    return [p.numpy() for p in params]


def random_problem(n_params=3, steps=3):
    shapes = [(4, 3), (4, 1), (1, 5), (7, 2)][:n_params] + [(2, 2)] * max(0, n_params - 4)
    p0s = [rng.normal(size=s) for s in shapes]
    grads = [[rng.normal(size=s) for s in shapes] for _ in range(steps)]
    return p0s, grads


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("momentum,wd", [(0.0, 0.0), (0.0, 0.1), (0.9, 0.0), (0.9, 0.05)])
def test_sgd_weight_decay_matches_numpy(steps, momentum, wd):
    p0s, grads = random_problem(steps=steps)
    got = run_optimizer(lambda ps: g.optimizer_sgd(ps, lr=0.1, momentum=momentum, weight_decay=wd), p0s, grads)
    for p0, gp, k in zip(p0s, got, range(len(p0s))):
        np.testing.assert_allclose(gp, numpy_sgd(p0, [gs[k] for gs in grads], 0.1, momentum, wd), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("cls,wd", [(g.optimizer_adamw, 0.1), (g.optimizer_adamw, 0.01), (g.optimizer_adam, 0.0)])
def test_adam_and_adamw_match_numpy(steps, cls, wd):
    p0s, grads = random_problem(steps=steps)
    got = run_optimizer(lambda ps: cls(ps, lr=0.05, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=wd), p0s, grads)
    for k, (p0, gp) in enumerate(zip(p0s, got)):
        expect = numpy_adam(p0, [gs[k] for gs in grads], 0.05, 0.8, 0.95, 1e-6, wd)
        np.testing.assert_allclose(gp, expect, rtol=1e-5, atol=1e-6)


def test_fused_adam_keeps_ggmlrs_one_minus_beta():
    """ggml's kernel computes 1 - beta2 in float32 (0.999 -> 1.3e-5 off); the bias corrections
    take that back, so 30 default-beta steps stay within float32 noise of the double formula."""
    r = np.random.default_rng(3)
    grads = [r.normal(size=(16, 8)) for _ in range(30)]
    got = run_optimizer(lambda ps: g.optimizer_adam(ps, lr=0.01), [np.zeros((16, 8))], [[gr] for gr in grads])[0]
    expect = numpy_adam(np.zeros((16, 8)), grads, 0.01, 0.9, 0.999, 1e-8, 0.0)
    np.testing.assert_allclose(got, expect, rtol=4e-6)  # uncorrected: 8.5e-6


@pytest.mark.parametrize("make", [lambda ps: g.optimizer_adamw(ps, lr=0.01, weight_decay=0.1),
                                  lambda ps: g.optimizer_sgd(ps, lr=0.1, momentum=0.9, weight_decay=0.01)])
def test_fused_step_equals_composed_step(make):
    """The fused graph overwrites p, m, v while reading them: it must agree with the op-by-op path.
    More parameters than one graph group holds, so grouping is covered too."""
    p0s, grads = random_problem(n_params=fused.GROUP + 5, steps=3)
    a = run_optimizer(make, p0s, grads, fused_path=True)
    b = run_optimizer(make, p0s, grads, fused_path=False)
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)  # f32 rounding of values near 1


def test_missing_kernel_falls_back_without_updating_twice(monkeypatch):
    """A device without ggml's optimizer kernel: the groups already updated stay done, the rest
    (and every later step) take the op-by-op path."""
    from ggmlpy.runtime.executor import Executor
    p0s, grads = random_problem(n_params=fused.GROUP + 3, steps=2)
    expect = run_optimizer(lambda ps: g.optimizer_adam(ps, lr=0.01), p0s, grads, fused_path=False)
    real_run, calls = Executor.run, []

    def run(self, key, *args, **kwargs):
        if key[0] == "opt_step_adamw":
            calls.append(key)
            if len(calls) > 1:  # the second group's graph "has no kernel"
                raise g.GGMLError("CPU has no kernel for OPT_STEP_ADAMW on f32")
        return real_run(self, key, *args, **kwargs)

    monkeypatch.setattr(Executor, "run", run)
    got = run_optimizer(lambda ps: g.optimizer_adam(ps, lr=0.01), p0s, grads)
    assert len(calls) == 2  # then no more tries
    for u, v in zip(got, expect):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def test_f16_parameters_take_the_mixed_precision_path():
    p = g.ag_param(np.ones((4, 3)), dtype="f16")  # ggml's kernels are f32 only
    opt = g.optimizer_adamw([p], lr=0.01, weight_decay=0.1)
    gm = g.GradMap()
    dict.__setitem__(gm, p.id, g.ag_tensor(np.full((4, 3), 2.0)))
    opt.step(gm)
    assert p.dtype == "f16" and opt._fused_ok
    np.testing.assert_allclose(p.numpy(), numpy_adam(np.ones((4, 3)), [np.full((4, 3), 2.0)], 0.01, 0.9, 0.999,
                                                     1e-8, 0.1), rtol=1e-3)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("make", [lambda ps: g.optimizer_adam(ps, lr=0.01),
                                  lambda ps: g.optimizer_adamw(ps, lr=0.01, weight_decay=0.1),
                                  lambda ps: g.optimizer_sgd(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
                                  lambda ps: g.optimizer_sgd(ps, lr=0.1)])
def test_low_precision_parameters_step_in_f32(dtype, make):
    """f16/bf16 parameters: moments in f32, the update computed in f32, the result rounded once.
    A zero gradient (an embedding row no batch used) leaves its entries finite: in f16, Adam's v and
    eps are 0 and the old update was 0 / 0 = NaN."""
    p0s, grads = random_problem(n_params=3, steps=3)
    for gs in grads:
        gs[0][:, 1] = 0.0  # one column never gets a gradient
        gs[1][:] = 1e-4 * gs[1]  # small gradients: (1 - b2) g^2 is below f16's smallest number
    params = [g.ag_param(p0, dtype=dtype) for p0 in p0s]
    start = [p.numpy().astype(np.float64) for p in params]
    opt = make(params)
    for gs in grads:
        gm = g.GradMap()
        for p, gr in zip(params, gs):
            dict.__setitem__(gm, p.id, g.ag_tensor(gr, dtype=dtype))
        opt.step(gm)
    assert all(p.dtype == dtype for p in params)
    assert all(np.isfinite(p.numpy()).all() for p in params)
    ref_opt = make([g.ag_param(s0) for s0 in start])  # the same steps in f32 from the rounded start
    for gs in grads:
        gm = g.GradMap()
        for p, gr in zip(ref_opt.params, gs):
            dict.__setitem__(gm, p.id, g.ag_tensor(np.asarray(g.ag_tensor(gr, dtype=dtype).numpy(), float)))
        ref_opt.step(gm)
    tol = {"f16": 2e-3, "bf16": 1.6e-2}[dtype]
    for p, r in zip(params, ref_opt.params):
        np.testing.assert_allclose(p.numpy().astype(np.float64), r.numpy(), rtol=tol, atol=tol)


def test_f16_adam_training_learns_as_in_f32():
    """The ggmlR transformer demo's f16 fallback: an embedding lookup trained with Adam in f16 keeps
    every row finite and its loss falls as in f32 (within f16's precision)."""
    def train(dtype):
        old = g.ag_dtype(dtype)
        try:
            r = np.random.default_rng(5)
            emb = g.ag_param(r.normal(size=(8, 28)) * 0.1)  # 28 tokens, 8 dims; only 4 tokens are used
            w = g.ag_param(r.normal(size=(3, 8)) * 0.1)
            opt = g.optimizer_adam([emb, w], lr=0.02)
            ids, labels = np.array([0, 1, 2, 3]), np.array([0, 1, 2, 0])
            onehot = np.zeros((28, 4))
            onehot[ids, np.arange(4)] = 1.0
            target = np.eye(3)[:, labels]
            losses = []
            for _ in range(40):
                with g.with_grad_tape():
                    logits = g.ag_matmul(w, g.ag_matmul(emb, g.ag_tensor(onehot)))
                    diff = g.ag_sub(logits, g.ag_tensor(target))
                    loss = g.ag_mean(g.ag_mul(diff, diff))
                opt.step(g.backward(loss))
                losses.append(loss.item())
            return np.array(losses), emb.numpy()
        finally:
            g.ag_dtype(old)
    l16, e16 = train("f16")
    l32, _ = train("f32")
    assert np.isfinite(e16).all() and np.isfinite(l16).all()
    assert l16[-1] < 0.5 * l16[0]
    np.testing.assert_allclose(l16, l32, rtol=0.05, atol=2e-3)


def test_fused_step_updates_in_place_and_skips_params_without_grad():
    p, q = g.ag_param(np.ones((3, 2))), g.ag_param(np.ones((2, 2)))
    alias = p  # reference semantics: every handle sees the update
    opt = g.optimizer_adam([p, q], lr=0.1)
    gm = g.GradMap()
    dict.__setitem__(gm, p.id, g.ag_tensor(np.full((3, 2), 0.5)))
    opt.step(gm)
    np.testing.assert_allclose(alias.numpy(), 1 - 0.1, rtol=1e-7)  # first Adam step moves by lr
    np.testing.assert_array_equal(q.numpy(), np.ones((2, 2)))


def test_lr_change_is_seen_by_the_fused_step():
    """The learning rate is an input of the cached graph, not a constant compiled into it."""
    p = g.ag_param(np.zeros((2, 2)))
    opt = g.optimizer_sgd([p], lr=0.1)
    for lr in (0.1, 0.2):
        opt.lr = lr
        gm = g.GradMap()
        dict.__setitem__(gm, p.id, g.ag_tensor(np.ones((2, 2))))
        opt.step(gm)
    np.testing.assert_allclose(p.numpy(), -0.3, rtol=1e-6)


# -- reliability: memory stays flat over a long run -----------------------------------------------------------
RSS_SCRIPT = textwrap.dedent("""
    import os, numpy as np, ggmlpy as g

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    g.manual_seed(0)
    r = np.random.default_rng(0)
    x, y = r.normal(size=(32, 320)), r.integers(0, 10, 320)
    blocks = [g.ag_linear(64, 64, "relu") for _ in range(2)]
    first, head = g.ag_sequential(g.ag_linear(32, 64, "relu"), g.ag_dropout(0.1)), g.ag_linear(64, 10)

    class Net(g.Module):
        def __init__(self):
            super().__init__()
            self.first, self.blocks, self.head = first, blocks, head
        def forward(self, h):
            h = self.first(h)
            for b in self.blocks:
                h = g.ag_checkpoint(lambda t, b=b: b(t), h)
            return self.head(h)

    model = Net()
    marks = {}
    class Probe:
        def on_epoch_end(self, epoch, history):
            marks[epoch * 10] = rss()  # 10 batches of 32 per epoch
    g.ag_fit(model, g.ag_softmax_cross_entropy_loss, g.optimizer_adam(model.parameters(), lr=1e-3),
             g.ag_dataloader(x, y, 32), 100, val_loader=g.ag_dataloader(x, y, 160, shuffle=False),
             callbacks=[Probe()], progress=False)
    print(marks[100], marks[1000])
""")


def test_rss_stays_flat_over_1000_training_steps():
    if not os.path.exists("/proc/self/statm"):
        pytest.skip("needs /proc")
    # One thread: this is about memory; it also keeps the run short on a busy machine.
    env = dict(os.environ, GGMLPY_N_THREADS="1")
    out = subprocess.run([sys.executable, "-c", RSS_SCRIPT], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    at_100, at_1000 = map(int, out.stdout.split()[-2:])
    assert at_1000 - at_100 < 5 * 1024 * 1024, f"RSS grew {(at_1000 - at_100) / 2**20:.1f} MiB over 900 steps"


# -- the main job, briefly ---------------------------------------------------------------------------------------
def test_digits_few_epochs_reach_sanity_accuracy():
    pytest.importorskip("sklearn")
    from ggmlpy.cli import digits
    result = digits.train(epochs=3, progress=False, plot=None, verbose=False)
    assert result["test_accuracy"] > 0.85
    assert result["tape_bytes_checkpointed"] < result["tape_bytes_plain"]
    assert len(result["history"]["loss"]) == 3


def test_the_demo_trains_the_digits_from_the_installed_package(tmp_path):
    """`python -m ggmlpy demo`, the quick start's main job, runs from the package alone (an installed
    wheel has no scripts/ folder) and writes its loss curve under the working directory."""
    pytest.importorskip("sklearn")
    out = subprocess.run([sys.executable, "-m", "ggmlpy", "demo"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    accuracy = float(re.search(r"test accuracy\s+([\d.]+)%", out.stdout).group(1))
    assert accuracy >= 95.0, out.stdout
    has_matplotlib = importlib.util.find_spec("matplotlib") is not None
    assert (tmp_path / "out" / "digits_loss.png").is_file() == has_matplotlib


def test_clipping_and_optimizer_steps_over_hundreds_of_parameters():
    """One eager graph over every gradient (the squared norms, the fused Adam step) is sized by its
    inputs: 400 parameters (the 4-block GPT has 68) once overflowed ggml's context and aborted."""
    ps = [g.ag_param(np.full((3, 2), 0.5)) for _ in range(400)]
    with g.with_grad_tape():
        loss = None
        for p in ps:
            term = g.ag_sum(g.ag_mul(p, p))
            loss = term if loss is None else g.ag_add(loss, term)
    grads = g.backward(loss)
    assert g.clip_grad_norm(ps, grads, 1.0) == pytest.approx(np.sqrt(400 * 6), rel=1e-5)
    g.optimizer_adam(ps, lr=0.1).step(grads)
    np.testing.assert_allclose(ps[0].numpy(), 0.4, rtol=1e-5)


def test_ag_fit_history_plots_itself(tmp_path):
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4, 64)), rng.integers(0, 2, 64)
    model = g.ag_sequential(g.ag_linear(4, 8, "relu"), g.ag_linear(8, 2))
    opt = g.optimizer_adam(model.parameters(), lr=1e-2)
    history = g.ag_fit(model, g.ag_softmax_cross_entropy_loss, opt, g.ag_dataloader(x, y, 16), epochs=3,
                       val_loader=g.ag_dataloader(x, y, 32, shuffle=False), progress=False)
    assert isinstance(history, dict) and set(history) == {"loss", "lr", "time", "val_loss"}
    path = history.plot(tmp_path / "fit.png")
    assert pathlib.Path(path).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(g.GGMLError, match="could not write"):
        history.plot(tmp_path / "no" / "such" / "folder" / "fit.png")


def test_the_keras_like_callbacks_stop_and_anneal_as_train_s_do():
    """One Plateau test behind early_stopping and ggml_callback_early_stopping, one cosine curve behind
    lr_scheduler_cosine and ggml_schedule_cosine_decay: on the same values they stop at the same epoch and
    set the same rates."""
    from types import SimpleNamespace

    from ggmlpy.keras.callbacks import ggml_callback_early_stopping, ggml_schedule_cosine_decay
    from ggmlpy.train.callbacks import Plateau
    losses = [1.0, 0.9, 0.95, 0.91, 0.92, 0.5]
    ag_stop, keras_stop = g.early_stopping(patience=2, min_delta=0.01), ggml_callback_early_stopping(patience=2, min_delta=0.01)
    state, stopped = SimpleNamespace(stop=False), []
    for epoch, _ in enumerate(losses, 1):
        ag = ag_stop.on_epoch_end(epoch, {"val_loss": losses[:epoch]})
        keras_stop.on_epoch_end(epoch, {"val_loss": losses[epoch - 1]}, state)
        stopped.append((ag, state.stop))
        if ag or state.stop:
            break
    assert stopped == [(False, False), (False, False), (False, False), (True, True)]
    assert ag_stop.best == keras_stop.best == 0.9 and ag_stop.best_epoch == 2 and keras_stop.stopped_epoch == 4
    assert isinstance(ag_stop.plateau, Plateau) and isinstance(keras_stop, Plateau)

    opt, state = SimpleNamespace(lr=0.1), SimpleNamespace(lr=0.1, nepoch=5)
    sched, keras_cos = g.lr_scheduler_cosine(opt, T_max=5, lr_min=0.01), ggml_schedule_cosine_decay(eta_min=0.01, T_max=5)
    for epoch in range(1, 6):
        keras_cos.on_epoch_begin(epoch, {}, state)
        assert state.lr == pytest.approx(opt.lr, rel=1e-15)  # epoch e's rate: the scheduler's after e - 1 steps
        sched.step()


@pytest.mark.parametrize("make,reference", [
    (lambda ps: g.optimizer_adam(ps, lr=0.05, beta1=0.8, beta2=0.95, eps=1e-6),
     lambda p0, gs: numpy_adam(p0, gs, 0.05, 0.8, 0.95, 1e-6, 0.0)),
    (lambda ps: g.optimizer_adamw(ps, lr=0.05, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.1),
     lambda p0, gs: numpy_adam(p0, gs, 0.05, 0.8, 0.95, 1e-6, 0.1)),
    (lambda ps: g.optimizer_sgd(ps, lr=0.1), lambda p0, gs: numpy_sgd(p0, gs, 0.1, 0.0, 0.0)),
    (lambda ps: g.optimizer_sgd(ps, lr=0.1, momentum=0.9, weight_decay=0.05),
     lambda p0, gs: numpy_sgd(p0, gs, 0.1, 0.9, 0.05))])
def test_the_three_update_paths_give_the_same_numbers(make, reference, monkeypatch):
    """optim/optimizers.py's three ways of each update (ggml's kernel, fused.py's f32 nodes, composed ag_*
    ops) on one f32 problem: the same numbers, and numpy's. The node path, written for f16/bf16
    parameters, is taken here by f32 ones (its casts are then copies)."""
    p0s, grads = random_problem(n_params=fused.GROUP + 2, steps=3)
    kernel = run_optimizer(make, p0s, grads, fused_path=True)
    composed = run_optimizer(make, p0s, grads, fused_path=False)
    from ggmlpy.runtime.executor import Executor
    real_run, graphs = Executor.run, []

    def run(self, key, *args, **kwargs):
        graphs.append(key[0])
        return real_run(self, key, *args, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(fused, "fusable", lambda *items: False)
        m.setattr(fused, "mixed_fusable", lambda *items: True)
        m.setattr(Executor, "run", run)
        nodes = run_optimizer(make, p0s, grads, fused_path=True)
    assert graphs and set(graphs) <= {"adam_mixed", "sgd_mixed"}  # every update went through the nodes
    for k, p0 in enumerate(p0s):
        expect = reference(p0, [gs[k] for gs in grads])
        for path in (kernel, composed, nodes):
            np.testing.assert_allclose(path[k], expect, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(nodes[k], kernel[k], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(composed[k], kernel[k], rtol=1e-5, atol=1e-6)
