"""ggmlR's tests/testthat/test-ag-training.R: ag_dataloader, lr schedulers, clip_grad_norm, dp_train.

Batches answer `batch.x` as R's `batch$x`; R's 1-based sample values (1..n) are kept."""
import numpy as np

import ggmlpy as g
from .conftest import expect_equal


def runif(seed, *shape):
    return np.random.default_rng(seed).uniform(size=shape)


def seq_row(n):  # R's matrix(seq_len(n), 1, n)
    return np.arange(1.0, n + 1).reshape(1, n)


# ---- ag_dataloader ----------------------------------------------------------------------------------
def test_ag_dataloader_basic_shape():
    n = 64
    dl = g.ag_dataloader(runif(0, 4, n), runif(1, 2, n), batch_size=16, shuffle=False)
    assert dl.n_batches() == 4
    batch = dl.next_batch()
    assert isinstance(batch.x, g.AGTensor)
    assert batch.x.data.shape == (4, 16)
    assert batch.y.data.shape == (2, 16)


def test_ag_dataloader_covers_all_samples_no_shuffle():
    n = 32
    dl = g.ag_dataloader(seq_row(n), batch_size=8, shuffle=False)
    seen = []
    while dl.has_next():
        seen.extend(dl.next_batch().x.data.astype(int).ravel())
    assert sorted(seen) == list(range(1, n + 1))


def test_ag_dataloader_shuffle_produces_different_order():
    g.ggml_set_seed(42)
    n = 100
    dl1 = g.ag_dataloader(seq_row(n), batch_size=10, shuffle=True)
    dl2 = g.ag_dataloader(seq_row(n), batch_size=10, shuffle=False)

    def get_all(dl):
        out = []
        while dl.has_next():
            out.extend(dl.next_batch().x.data.astype(int).ravel())
        return out

    ord1, ord2 = get_all(dl1), get_all(dl2)
    assert ord1 != ord2
    assert sorted(ord1) == sorted(ord2)


def test_ag_dataloader_reset_reshuffles():
    g.ggml_set_seed(1)
    dl = g.ag_dataloader(seq_row(20), batch_size=5, shuffle=True)
    ord1 = dl.order.copy()
    dl.reset()
    ord2 = dl.order
    assert not np.array_equal(ord1, ord2)


def test_ag_dataloader_has_next_false_after_exhaustion():
    dl = g.ag_dataloader(seq_row(10), batch_size=5)
    dl.next_batch()
    dl.next_batch()
    assert not dl.has_next()


def test_ag_dataloader_col_major_false_transposes():
    n = 16
    dl = g.ag_dataloader(runif(2, n, 4), batch_size=8, col_major=False)  # row-major [n, features]
    assert dl.next_batch().x.data.shape == (4, 8)  # [features, batch]


def test_ag_dataloader_epoch_returns_all_batches():
    dl = g.ag_dataloader(seq_row(32), batch_size=8, shuffle=False)
    assert len(dl.epoch()) == 4


# ---- lr_scheduler_step ------------------------------------------------------------------------------
def test_lr_scheduler_step_decays_at_correct_steps():
    opt = g.optimizer_sgd({"w": g.ag_param(np.ones((2, 2)))}, lr=1.0)
    sch = g.lr_scheduler_step(opt, step_size=5, gamma=0.5)
    for _ in range(5):
        sch.step()
    expect_equal(opt.lr, 0.5, rtol=1e-9, atol=0)
    for _ in range(5):
        sch.step()
    expect_equal(opt.lr, 0.25, rtol=1e-9, atol=0)
    for _ in range(4):
        sch.step()  # only 4: no decay yet
    expect_equal(opt.lr, 0.25, rtol=1e-9, atol=0)
    sch.step()  # the 5th: decay
    expect_equal(opt.lr, 0.125, rtol=1e-9, atol=0)


def test_lr_scheduler_step_no_decay_before_step_size():
    opt = g.optimizer_sgd({"w": g.ag_param(np.ones((2, 2)))}, lr=0.1)
    sch = g.lr_scheduler_step(opt, step_size=10, gamma=0.1)
    for _ in range(9):
        sch.step()
    expect_equal(opt.lr, 0.1, rtol=1e-9, atol=0)


# ---- lr_scheduler_cosine ----------------------------------------------------------------------------
def test_lr_scheduler_cosine_lr_decreases_toward_lr_min():
    """First step slightly below the max, the last near 0. (ggmlR's first step leaves the lr at
    the max: its k-th step sets step k - 1's value; see lr_scheduler_cosine and docs/divergences.md.)"""
    opt = g.optimizer_adam({"w": g.ag_param(np.ones((2, 2)))}, lr=0.1)
    sch = g.lr_scheduler_cosine(opt, T_max=10, lr_min=0)
    lrs = [sch.step() for _ in range(10)]
    assert lrs[9] < lrs[0]
    assert lrs[9] < 0.01
    assert lrs[0] < 0.1  # "slightly below max", as the R test's comment says
    expect_equal(lrs[9], 0.0, atol=1e-12)  # it reaches lr_min at T_max (ggmlR stops one step short)


def test_lr_scheduler_cosine_stays_at_lr_min_after_t_max_no_restart():
    opt = g.optimizer_adam({"w": g.ag_param(np.ones((2, 2)))}, lr=0.1)
    sch = g.lr_scheduler_cosine(opt, T_max=5, lr_min=0.01, restart=False)
    for _ in range(5):
        sch.step()
    lr_at_5 = opt.lr
    sch.step()  # beyond T_max
    expect_equal(opt.lr, lr_at_5, rtol=1e-9, atol=0)
    expect_equal(lr_at_5, 0.01, rtol=1e-9, atol=0)  # and that is lr_min, as the test's name says


def test_lr_scheduler_cosine_restarts_correctly():
    opt = g.optimizer_adam({"w": g.ag_param(np.ones((2, 2)))}, lr=0.1)
    sch = g.lr_scheduler_cosine(opt, T_max=5, lr_min=0, restart=True)
    lrs = [sch.step() for _ in range(10)]
    assert lrs[4] < lrs[0]  # cycle 1 decreases
    assert lrs[5] > lrs[4]  # step 6 restarts near the max, step 5 is near 0


# ---- clip_grad_norm ---------------------------------------------------------------------------------
def _mse_grads(w, x_col):
    x = g.ag_tensor(x_col)
    with g.with_grad_tape():
        out = g.ag_matmul(w, x)
        loss = g.ag_mse_loss(out, np.zeros((2, 1)))
    return g.backward(loss)


def test_clip_grad_norm_does_not_clip_when_norm_below_max_norm():
    w = g.ag_param(np.full((2, 2), 0.1))
    grads = _mse_grads(w, np.array([[1.0], [1]]))
    orig_g = grads[w].data
    g.clip_grad_norm({"w": w}, grads, max_norm=1000)
    expect_equal(grads[w].data, orig_g, rtol=1e-10, atol=0)


def test_clip_grad_norm_clips_to_max_norm():
    w = g.ag_param(np.array([[1.0, 3], [2, 4]]))
    grads = _mse_grads(w, np.array([[10.0], [10]]))
    pre_norm = g.clip_grad_norm({"w": w}, grads, max_norm=1.0)
    clipped_norm = np.sqrt(np.sum(grads[w].data ** 2))
    assert pre_norm > 1.0
    expect_equal(clipped_norm, 1.0, rtol=1e-5, atol=0)


def test_clip_grad_norm_works_with_multiple_params():
    w1, w2 = g.ag_param(runif(3, 2, 2)), g.ag_param(runif(4, 2, 2))
    x = g.ag_tensor(np.array([[1.0], [1]]))
    with g.with_grad_tape():
        out = g.ag_matmul(w2, g.ag_matmul(w1, x))
        loss = g.ag_mse_loss(out, np.zeros((2, 1)))
    grads = g.backward(loss)
    g.clip_grad_norm({"w1": w1, "w2": w2}, grads, max_norm=0.5)
    joint_norm = np.sqrt(np.sum(grads[w1].data ** 2) + np.sum(grads[w2].data ** 2))
    expect_equal(joint_norm, 0.5, rtol=1e-5, atol=0)


# ---- integration ------------------------------------------------------------------------------------
def test_integration_dataloader_scheduler_clip_grad_trains():
    g.ggml_set_seed(99)
    n = 64
    x_mat = runif(99, 4, n)
    y_mat = np.vstack([np.ones(n), np.zeros(n)])
    dl = g.ag_dataloader(x_mat, y_mat, batch_size=16, shuffle=True)
    model = g.ag_sequential(g.ag_linear(4, 8, activation="relu"), g.ag_linear(8, 2))
    params = model.parameters()
    opt = g.optimizer_adam(params, lr=0.05)
    sch = g.lr_scheduler_step(opt, step_size=5, gamma=0.5)
    all_losses = []
    for _ in range(15):
        epoch_loss = 0.0
        batches = dl.epoch()
        for batch in batches:
            with g.with_grad_tape():
                out = model.forward(batch.x)
                loss = g.ag_mse_loss(out, batch.y)
            grads = g.backward(loss)
            g.clip_grad_norm(params, grads, max_norm=5.0)
            opt.step(grads)
            opt.zero_grad()
            epoch_loss += loss.data[0, 0]
        all_losses.append(epoch_loss / len(batches))
        sch.step()
    assert np.mean(all_losses[-3:]) < np.mean(all_losses[:3])
    assert opt.lr < 0.05  # decayed after epochs 5 and 10


# ---- dp_train ---------------------------------------------------------------------------------------
def test_dp_train_1_replica_converges_on_simple_regression():
    rng = np.random.default_rng(7)
    D_IN, D_OUT, N = 3, 2, 32
    X = rng.normal(size=(D_IN, N))
    Y = X[:D_OUT, :] * 0.5 + 0.1
    data = [{"x": X[:, [i]], "y": Y[:, [i]]} for i in range(N)]

    def make_model():
        W = g.ag_param(rng.normal(size=(D_OUT, D_IN)) * 0.1)
        b = g.ag_param(np.zeros((D_OUT, 1)))
        return {"forward": lambda x: g.ag_add(g.ag_matmul(W, x), b), "parameters": lambda: {"W": W, "b": b}}

    result = g.dp_train(make_model=make_model, data=data, loss_fn=lambda out, tgt: g.ag_mse_loss(out, tgt),
                        forward_fn=lambda model, s: model["forward"](g.ag_tensor(s["x"])),
                        target_fn=lambda s: s["y"], n_gpu=1, n_iter=60, lr=1e-2, verbose=False)
    assert list(result) == ["params", "loss_history", "model"]
    assert len(result["loss_history"]) == 60
    assert np.mean(result["loss_history"][-10:]) < result["loss_history"][0]


def test_dp_train_2_replicas_initial_weight_sync_and_no_nan():
    rng = np.random.default_rng(8)
    D_IN, D_OUT = 3, 2
    replicas = []

    def make_model():
        W = g.ag_param(rng.normal(size=(D_OUT, D_IN)) * 0.1)
        replicas.append(W)
        return {"forward": lambda x: g.ag_matmul(W, x), "parameters": lambda: {"W": W}}

    data = [{"x": rng.normal(size=(D_IN, 1)), "y": rng.normal(size=(D_OUT, 1))} for _ in range(8)]
    result = g.dp_train(make_model=make_model, data=data, loss_fn=lambda out, tgt: g.ag_mse_loss(out, tgt),
                        forward_fn=lambda model, s: model["forward"](g.ag_tensor(s["x"])),
                        target_fn=lambda s: s["y"], n_gpu=2, n_iter=8, lr=1e-2, verbose=False)
    assert list(result) == ["params", "loss_history", "model"]
    assert len(result["loss_history"]) == 8
    assert not np.any(np.isnan(result["loss_history"]))
    np.testing.assert_array_equal(replicas[0].data, replicas[1].data)  # the replicas stay in step


def test_dp_train_returns_loss_history_of_correct_length():
    rng = np.random.default_rng(9)

    def make_model():
        W = g.ag_param(rng.normal(size=(2, 2)) * 0.1)
        return {"forward": lambda x: g.ag_matmul(W, x), "parameters": lambda: {"W": W}}

    data = [rng.normal(size=(2, 1)) for _ in range(8)]
    result = g.dp_train(make_model=make_model, data=data, loss_fn=lambda out, tgt: g.ag_mse_loss(out, tgt),
                        n_gpu=1, n_iter=20, lr=1e-3, verbose=False)
    assert len(result["loss_history"]) == 20
    assert np.all(np.isfinite(result["loss_history"]))
