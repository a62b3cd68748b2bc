"""inst/examples/functional_text_gru.R: int32 token input, embedding, GRU with a skip connection,
dropout, binary sentiment on synthetic reviews; save/load."""
import numpy as np

import ggmlpy as g

# The script trains on 800 reviews (200 held out) for 10 epochs; a GRU unrolled over 30 tokens is
# the slowest graph of these examples, so the test uses 480 reviews (120 held out) for 8 epochs,
# enough steps for the signal (which half of the vocabulary the tokens come from).
N_TRAIN, N_TEST, EPOCHS = 480, 120, 8


def test_functional_text_gru(capsys, tmp_path):
    rng = np.random.default_rng(42)   # set.seed(42)
    g.ggml_set_seed(42)

    # 1. Synthetic dataset
    VOCAB_SIZE, SEQ_LEN = 500, 30
    N_TOTAL = N_TRAIN + N_TEST

    def make_seq(n, positive):
        low = VOCAB_SIZE // 2 if positive else 0
        high = VOCAB_SIZE - 1 if positive else VOCAB_SIZE // 2 - 1
        return rng.integers(low, high + 1, size=(n, SEQ_LEN))

    n_pos = N_TOTAL // 2
    n_neg = N_TOTAL - n_pos
    x_all = np.vstack([make_seq(n_pos, True), make_seq(n_neg, False)])        # [N, SEQ_LEN] int
    y_all = np.array([[1, 0]] * n_pos + [[0, 1]] * n_neg, dtype=float)          # one-hot
    shuffle = rng.permutation(N_TOTAL)
    x_all, y_all = x_all[shuffle], y_all[shuffle]
    x_train, y_train = x_all[:N_TRAIN], y_all[:N_TRAIN]
    x_test, y_test = x_all[N_TRAIN:N_TRAIN + N_TEST], y_all[N_TRAIN:N_TRAIN + N_TEST]
    print("Train:", x_train.shape[0], "x", x_train.shape[1], " | Test:", x_test.shape[0], "x", x_test.shape[1])

    # 2. Build model (Functional API)
    EMBED_DIM, GRU_UNITS = 32, 32
    inp = g.ggml_input(shape=SEQ_LEN, dtype="int32", name="tokens")
    emb = g.ggml_layer_embedding(inp, VOCAB_SIZE, EMBED_DIM, name="embed")
    proj_a = g.ggml_layer_gru(emb, GRU_UNITS, return_sequences=False, name="gru_a")
    proj_a = g.ggml_layer_dense(proj_a, 32, name="proj_a")
    proj_b = g.ggml_layer_flatten(emb, name="emb_flat")
    proj_b = g.ggml_layer_dense(proj_b, 32, activation="relu", name="proj_b1")
    proj_b = g.ggml_layer_dense(proj_b, 32, name="proj_b2")
    merged = g.ggml_layer_add([proj_a, proj_b], name="residual_add")
    hidden = g.ggml_layer_dense(merged, 16, activation="relu", name="hidden")
    hidden = g.ggml_layer_dropout(hidden, rate=0.3, name="drop")
    hidden = g.ggml_layer_dense(hidden, 2, activation="softmax", name="output")
    model = g.ggml_model(inputs=inp, outputs=hidden)
    print("\nModel summary:")
    print(model)

    # 3. Compile
    model = g.ggml_compile(model, optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])

    # 4. Train
    print("\nTraining...")
    model = g.ggml_fit(model, x_train, y_train, epochs=EPOCHS, batch_size=64, validation_split=0.15, verbose=1)

    # 5. Evaluate & predict
    score = g.ggml_evaluate(model, x_test, y_test, batch_size=64)
    print("\nTest loss    :", round(score["loss"], 4))
    print("Test accuracy:", round(score["accuracy"], 4))
    probs = g.ggml_predict(model, x_test, batch_size=64)
    classes = np.argmax(probs, axis=1)     # 0 = positive, 1 = negative
    true = np.argmax(y_test, axis=1)
    table = np.zeros((2, 2), dtype=int)
    np.add.at(table, (true, classes), 1)
    print("\nConfusion matrix (rows = true, cols = predicted):")
    print(table)

    # 6. Save / load
    path = tmp_path / "model.rds"
    g.ggml_save_model(model, path)
    print("\nModel saved to:", path)
    model2 = g.ggml_load_model(path)
    score2 = g.ggml_evaluate(model2, x_test, y_test, batch_size=64)
    print("Loaded model test accuracy:", round(score2["accuracy"], 4))

    out = capsys.readouterr().out
    h = model.history["train_loss"]
    assert np.all(np.isfinite(h)) and h[-1] < h[0]
    assert "gru_a" in out and "residual_add" in out
    assert score["accuracy"] > 0.75   # tokens from one half of the vocabulary or the other
    assert score2["accuracy"] == score["accuracy"]
