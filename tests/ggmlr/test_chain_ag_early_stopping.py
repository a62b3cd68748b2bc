"""ggmlR's tests/testthat/test-chain-ag-early-stopping.R: manual early stopping with a weight
restore, a scheduler + clip_grad + dataloader pipeline, and dp_train on raw ag_params.

R's data come from set.seed(42) + rnorm; here from numpy with the same seed (other draws, the
same distributions). The file's own `ag_predict` helper is `softmax_probs` here (ggmlpy has an
ag_predict of its own)."""
import numpy as np

import ggmlpy as g


def softmax_probs(model, x_col):
    """The R file's helper: column-wise softmax of the model's logits, in chunks of 32 columns."""
    n = x_col.shape[1]
    out = np.zeros((2, n))
    for s in range(0, n, 32):
        e = min(s + 32, n)
        lg = model.forward(g.ag_tensor(x_col[:, s:e])).data
        ev = np.exp(lg - lg.max(axis=0))
        out[:, s:e] = ev / ev.sum(axis=0)
    return out


def bce_loss(probs, targets):
    p = np.clip(probs, 1e-7, 1 - 1e-7)
    return -np.mean(targets[0] * np.log(p[0]) + targets[1] * np.log(p[1]))


def two_blobs(rng, n, centre, sd):
    x_all = np.vstack([rng.normal(-centre, sd, size=(n // 2, 2)), rng.normal(centre, sd, size=(n // 2, 2))])
    y_all = np.vstack([np.tile([1.0, 0], (n // 2, 1)), np.tile([0.0, 1], (n // 2, 1))])
    return x_all, y_all


def test_chain_ag_early_stopping_stops_training_and_restores_best_weights():
    rng = np.random.default_rng(42)
    g.ggml_set_seed(42)
    n = 120
    x_all, y_all = two_blobs(rng, n, 1.5, 0.5)  # linearly separable
    idx_val = np.r_[0:12, 60:72]
    idx_tr = np.setdiff1d(np.arange(n), idx_val)
    x_tr, y_tr = x_all[idx_tr].T, y_all[idx_tr].T  # [2, n_tr]
    x_vl, y_vl = x_all[idx_val].T, y_all[idx_val].T
    m = g.ag_sequential(g.ag_linear(2, 16, activation="relu"), g.ag_linear(16, 2))
    params = m.parameters()
    opt = g.optimizer_adam(params, lr=1e-2)
    patience, best_val_loss, best_weights, wait, stopped_epoch = 10, np.inf, None, 0, None
    n_tr, BS = x_tr.shape[1], 16
    g.ag_train(m)
    for ep in range(1, 201):
        perm = rng.permutation(n_tr)
        for b in range(-(-n_tr // BS)):
            idx = perm[b * BS:min((b + 1) * BS, n_tr)]
            xb = g.ag_tensor(x_tr[:, idx])
            yb = y_tr[:, idx]
            with g.with_grad_tape():
                loss = g.ag_softmax_cross_entropy_loss(m.forward(xb), yb)
            opt.step(g.backward(loss))
            opt.zero_grad()
        g.ag_eval(m)
        vl = bce_loss(softmax_probs(m, x_vl), y_vl)
        g.ag_train(m)
        if vl < best_val_loss - 1e-4:
            best_val_loss, best_weights, wait = vl, {k: p.data for k, p in params.items()}, 0
        else:
            wait += 1
            if wait >= patience:
                stopped_epoch = ep
                break
    assert stopped_epoch is not None
    assert stopped_epoch < 200
    assert best_weights is not None
    for name in params.keys():  # restore the best weights
        params[name].data = best_weights[name]
    g.ag_eval(m)
    probs = softmax_probs(m, x_vl)
    assert probs.shape[0] == 2
    assert probs.shape[1] == x_vl.shape[1]
    assert np.all(np.isfinite(probs))
    assert np.all((probs >= 0) & (probs <= 1))
    acc = np.mean(probs.argmax(axis=0) == y_vl.argmax(axis=0))
    assert acc > 0.7


def test_chain_ag_pipeline_scheduler_clip_grad_dataloader_trains():
    rng = np.random.default_rng(42)
    g.ggml_set_seed(42)
    x_all, y_all = two_blobs(rng, 80, 2, 0.5)
    x_cm, y_cm = x_all.T, y_all.T  # [2, n]
    m = g.ag_sequential(g.ag_linear(2, 16, activation="relu"), g.ag_batch_norm(16), g.ag_dropout(0.2),
                        g.ag_linear(16, 2))
    params = m.parameters()
    opt = g.optimizer_adam(params, lr=1e-2)
    sch = g.lr_scheduler_cosine(opt, T_max=30, lr_min=1e-4)
    dl = g.ag_dataloader(x_cm, y_cm, batch_size=16, shuffle=True)
    losses = np.zeros(30)
    g.ag_train(m)
    for ep in range(30):
        ep_loss, nb = 0.0, 0
        for batch in dl.epoch():
            with g.with_grad_tape():
                loss = g.ag_softmax_cross_entropy_loss(m.forward(batch.x), batch.y.data)
            grads = g.backward(loss)
            g.clip_grad_norm(params, grads, max_norm=5.0)
            opt.step(grads)
            opt.zero_grad()
            ep_loss += loss.data[0, 0]
            nb += 1
        losses[ep] = ep_loss / nb
        sch.step()
    assert losses[25:30].mean() < losses[0:5].mean()
    assert opt.lr < 1e-2
    g.ag_eval(m)
    assert np.all(np.isfinite(softmax_probs(m, x_cm)))


def test_chain_ag_raw_params_dp_train_converges_on_separable_data():
    rng = np.random.default_rng(42)
    x_all, y_all = two_blobs(rng, 60, 2, 0.3)
    dp_data = [{"x": x_all[i].reshape(2, 1), "y": y_all[i].reshape(2, 1)} for i in range(60)]

    def make_model():
        W1 = g.ag_param(rng.normal(size=(16, 2)) * 0.5)
        b1 = g.ag_param(np.zeros((16, 1)))
        W2 = g.ag_param(rng.normal(size=(2, 16)) * 0.5)
        b2 = g.ag_param(np.zeros((2, 1)))

        def forward(x):
            h = g.ag_relu(g.ag_add(g.ag_matmul(W1, x), b1))
            return g.ag_add(g.ag_matmul(W2, h), b2)

        return {"forward": forward, "parameters": lambda: {"W1": W1, "b1": b1, "W2": W2, "b2": b2}}

    res = g.dp_train(make_model=make_model, data=dp_data,
                     loss_fn=lambda out, tgt: g.ag_softmax_cross_entropy_loss(out, tgt),
                     forward_fn=lambda model, s: model["forward"](g.ag_tensor(s["x"])),
                     target_fn=lambda s: s["y"], n_gpu=1, n_iter=500, lr=1e-3, verbose=False)
    lh = res["loss_history"]
    assert np.mean(lh[-50:]) < np.mean(lh[:50])
