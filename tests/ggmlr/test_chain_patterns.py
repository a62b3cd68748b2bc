"""ggmlR tests/testthat/test-chain-patterns.R: popular patterns end to end (ag_* regression,
transfer learning, save/load with batch_norm, multi-input Functional, dropout at predict).
R's random data are drawn with numpy (same distributions)."""
import numpy as np

import ggmlpy as g


def test_chain_pattern_autograd_regression_with_mse_loss():
    rng = np.random.default_rng(42)
    n = 80
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    y_true = 2 * x1 + 3 * x2 + 1 + rng.normal(scale=0.1, size=n)
    x_cm = np.vstack([x1, x2])
    y_cm = y_true.reshape(1, n)
    m = g.ag_sequential(g.ag_linear(2, 16, activation="relu"), g.ag_linear(16, 1))
    opt = g.optimizer_adam(m.parameters(), lr=1e-2)
    bs = 16
    losses = np.zeros(50)
    g.ag_train(m)
    for ep in range(50):
        perm = rng.permutation(n)
        ep_loss, nb = 0.0, 0
        for b in range(int(np.ceil(n / bs))):
            idx = perm[b * bs:min((b + 1) * bs, n)]
            xb = g.ag_tensor(x_cm[:, idx])
            yb = g.ag_tensor(y_cm[:, idx])  # ggmlpy's ag losses take ag tensors (R: plain matrices)
            with g.with_grad_tape():
                pred = m.forward(xb)
                loss = g.ag_mse_loss(pred, yb)
            grads = g.backward(loss)
            opt.step(grads)
            opt.zero_grad()
            ep_loss += loss.item()
            nb += 1
        losses[ep] = ep_loss / nb
    assert losses[-5:].mean() < losses[:5].mean()
    g.ag_eval(m)
    pred = m.forward(g.ag_tensor(x_cm)).numpy()
    rmse = np.sqrt(np.mean((pred[0] - y_true) ** 2))
    assert rmse < 1.0


def test_chain_pattern_transfer_learning_freeze_backbone_train_head():
    rng = np.random.default_rng(42)
    n = 80
    x_all = np.vstack([rng.normal(-2, 0.5, (n // 2, 2)), rng.normal(2, 0.5, (n // 2, 2))])
    y_all = np.vstack([np.tile([1, 0], (n // 2, 1)), np.tile([0, 1], (n // 2, 1))]).astype(float)
    x_cm, y_cm = x_all.T, y_all.T
    backbone = g.ag_sequential(g.ag_linear(2, 16, activation="relu"), g.ag_linear(16, 8, activation="relu"))
    head = g.ag_linear(8, 2)
    bb_params = backbone.parameters()
    bb_before = [p.numpy().copy() for p in bb_params]
    opt = g.optimizer_adam(head.params(), lr=1e-2)
    bs = 16
    g.ag_train(backbone)
    g.ag_train(head)
    for ep in range(30):
        perm = rng.permutation(n)
        for b in range(int(np.ceil(n / bs))):
            idx = perm[b * bs:min((b + 1) * bs, n)]
            xb = g.ag_tensor(x_cm[:, idx])
            yb = g.ag_tensor(y_cm[:, idx])  # ggmlpy's ag losses take ag tensors (R: plain matrices)
            with g.with_grad_tape():
                logits = head.forward(backbone.forward(xb))
                loss = g.ag_softmax_cross_entropy_loss(logits, yb)
            grads = g.backward(loss)
            opt.step(grads)
            opt.zero_grad()
    for before, p in zip(bb_before, bb_params):
        np.testing.assert_array_equal(before, p.numpy(), err_msg="backbone params should be frozen")
    g.ag_eval(backbone)
    g.ag_eval(head)
    logits = head.forward(backbone.forward(g.ag_tensor(x_cm))).numpy()
    assert np.all(np.isfinite(logits))


def test_chain_pattern_save_load_sequential_batchnorm_preserves_predictions(tmp_path):
    rng = np.random.default_rng(42)
    n = 60
    x = rng.normal(size=(n, 2))
    y = np.column_stack([(x[:, 0] > 0), (x[:, 0] <= 0)]).astype(float)
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, 8, activation="relu", input_shape=2)
    m = g.ggml_layer_batch_norm(m)
    m = g.ggml_layer_dense(m, 2, activation="softmax")
    m = g.ggml_compile(m, optimizer="adam", loss="categorical_crossentropy")
    m = g.ggml_fit(m, x, y, epochs=30, batch_size=10, verbose=0)
    p_before = g.ggml_predict(m, x[:10], batch_size=10)
    path = tmp_path / "model.ggml"
    g.ggml_save_model(m, path)
    m2 = g.ggml_load_model(path)
    p_after = g.ggml_predict(m2, x[:10], batch_size=10)
    np.testing.assert_allclose(p_before, p_after, rtol=1e-4)


def test_chain_pattern_functional_multi_input_trains_and_predicts():
    rng = np.random.default_rng(42)
    n = 80
    x1 = rng.normal(size=(n, 3))
    cats = rng.integers(1, 5, n)
    x2 = np.zeros((n, 4))
    x2[np.arange(n), cats - 1] = 1
    y_class = (x1[:, 0] + (cats == 1) > 0).astype(int)
    y = np.column_stack([y_class, 1 - y_class]).astype(float)
    inp1, inp2 = g.ggml_input(shape=3), g.ggml_input(shape=4)
    h1 = g.ggml_layer_dense(inp1, 8, activation="relu")
    h2 = g.ggml_layer_dense(inp2, 8, activation="relu")
    merged = g.ggml_layer_add([h1, h2])
    out = g.ggml_layer_dense(merged, 2, activation="softmax")
    m = g.ggml_compile(g.ggml_model(inputs=[inp1, inp2], outputs=out), optimizer="adam",
                       loss="categorical_crossentropy")
    m = g.ggml_fit(m, x=[x1, x2], y=y, epochs=50, batch_size=10, verbose=0)
    p = g.ggml_predict(m, x=[x1, x2], batch_size=16)
    assert p.shape[0] == n
    assert p.shape[1] == 2
    assert np.all(np.isfinite(p))
    assert np.all(np.abs(p.sum(axis=1) - 1.0) < 0.05)


def test_chain_pattern_sequential_dropout_predict_is_deterministic():
    rng = np.random.default_rng(42)
    n = 40
    x = rng.normal(size=(n, 2))
    y = np.column_stack([(x[:, 0] > 0), (x[:, 0] <= 0)]).astype(float)
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, 16, activation="relu", input_shape=2)
    m = g.ggml_layer_dropout(m, 0.5)
    m = g.ggml_layer_dense(m, 2, activation="softmax")
    m = g.ggml_compile(m, optimizer="adam", loss="categorical_crossentropy")
    m = g.ggml_fit(m, x, y, epochs=20, batch_size=10, verbose=0)
    p1 = g.ggml_predict(m, x[:10], batch_size=10)
    p2 = g.ggml_predict(m, x[:10], batch_size=10)
    np.testing.assert_array_equal(p1, p2)
