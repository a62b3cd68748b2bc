"""inst/examples/transformer_encoder_demo.R: a tiny causal language model (embedding, sinusoidal
positions, one pre-norm encoder block with a layer norm written in autograd primitives) trained
with Adam and hand-written gradient clipping.

Where `ag_device("gpu")` falls back to the CPU, as here, the script takes its f16 path: that run
must train (ggmlR's turned into NaN there), and land where the f32 path does, within f16's
precision."""
import math
import types
import warnings

import numpy as np
import pytest

import ggmlpy as g


def transformer_encoder_demo(gpu_raises: bool = False):
    print("ggmlR version:", g.ggml_version())

    # 0. Hyperparameters and device
    rng = np.random.default_rng(42)   # set.seed(42L)
    g.ggml_set_seed(42)
    VOCAB_SIZE, D_MODEL, N_HEADS, D_FF = 16, 32, 4, 64
    SEQ_LEN, N_SEQS, N_ITER = 8, 8, 50
    LR, CLIP_NORM = 5e-4, 1.0

    try:  # tryCatch(ag_device("gpu"), error = ...): ggmlpy falls back to the CPU with a warning
        if gpu_raises:
            raise g.GGMLError("no GPU")
        g.ag_device("gpu")
        print("Device: GPU")
        device = "gpu"
    except g.GGMLError:
        print("Device: CPU")
        device = "cpu"
    if device == "gpu":
        g.ag_dtype("f16")
        print("Dtype:  f16 (mixed precision)")
    else:
        g.ag_dtype("f32")
        print("Dtype:  f32")
    print()

    # 1. Fixed sequences (memorization)
    train_seqs = [rng.integers(0, VOCAB_SIZE, SEQ_LEN) for _ in range(N_SEQS)]   # 0-based

    # 2. Embedding + positional encoding
    emb = g.ag_embedding(VOCAB_SIZE, D_MODEL)

    def make_pe(d_model, seq_len):
        pe = np.zeros((d_model, seq_len))
        for pos in range(1, seq_len + 1):
            for i in range(1, d_model + 1, 2):
                denom = 10000 ** ((i - 1) / d_model)
                pe[i - 1, pos - 1] = math.sin((pos - 1) / denom)
                if i + 1 <= d_model:
                    pe[i, pos - 1] = math.cos((pos - 1) / denom)
        return pe

    PE = make_pe(D_MODEL, SEQ_LEN)

    # 3. LayerNorm from autograd primitives (R: an environment of class "ag_layer_norm_custom";
    #    its ag_train/ag_eval methods are not needed: ggmlpy's reach every object's layers)
    class ag_layer_norm_custom:
        def __init__(self, d_model, eps=1e-5):
            self.gamma = g.ag_param(np.full((d_model, 1), 1.0))
            self.beta = g.ag_param(np.full((d_model, 1), 0.0))
            self.d_model = int(d_model)
            self.eps = eps

        def forward(self, x):
            mu = g.ag_mean(x, dim=2, keepdim=True)                       # [1, seq_len]
            xc = g.ag_sub(x, mu)
            var = g.ag_mean(g.ag_pow(xc, 2.0), dim=2, keepdim=True)
            inv_std = g.ag_pow(g.ag_add(var, g.ag_tensor(np.full((1, 1), self.eps))), -0.5)
            xn = g.ag_mul(xc, inv_std)
            return g.ag_add(g.ag_mul(xn, self.gamma), self.beta)

        def parameters(self):
            return g.ParamList({"gamma": self.gamma, "beta": self.beta})

    # 4. FeedForward block
    class ff_block:
        def __init__(self, d_model, d_ff):
            lim1, lim2 = math.sqrt(2.0 / d_model), math.sqrt(2.0 / d_ff)
            self.W1 = g.ag_param(rng.uniform(-lim1, lim1, size=(d_ff, d_model)))
            self.b1 = g.ag_param(np.zeros((d_ff, 1)))
            self.W2 = g.ag_param(rng.uniform(-lim2, lim2, size=(d_model, d_ff)))
            self.b2 = g.ag_param(np.zeros((d_model, 1)))

        def forward(self, x):
            h = g.ag_add(g.ag_matmul(self.W1, x), self.b1)
            h = g.ag_relu(h)
            return g.ag_add(g.ag_matmul(self.W2, h), self.b2)

        def parameters(self):
            return g.ParamList({"W1": self.W1, "b1": self.b1, "W2": self.W2, "b2": self.b2})

    # 5. Transformer encoder block (pre-norm)
    class transformer_encoder_block:
        def __init__(self, d_model, n_heads, d_ff, dropout=0.0):
            self.ln1 = ag_layer_norm_custom(d_model)
            self.mha = g.ag_multihead_attention(d_model, n_heads, dropout=dropout)
            self.ln2 = ag_layer_norm_custom(d_model)
            self.ff = ff_block(d_model, d_ff)
            self.drop = g.ag_dropout(dropout)

        def forward(self, x, causal_mask=False):
            xn = self.ln1.forward(x)
            attn = self.mha.forward(xn, causal_mask=causal_mask)
            x = g.ag_add(x, attn)
            xn = self.ln2.forward(x)
            ff = self.drop.forward(self.ff.forward(xn))
            return g.ag_add(x, ff)

        def parameters(self):
            return self.ln1.parameters() + self.mha.parameters() + self.ln2.parameters() + self.ff.parameters()

    # 6. Tiny LM
    tinyLM = types.SimpleNamespace()   # new.env()
    tinyLM.emb = emb
    tinyLM.encoder = transformer_encoder_block(D_MODEL, N_HEADS, D_FF, dropout=0.0)
    lim_head = math.sqrt(2.0 / D_MODEL)
    tinyLM.W_head = g.ag_param(rng.uniform(-lim_head, lim_head, size=(VOCAB_SIZE, D_MODEL)))

    def forward(tokens, causal_mask=True):
        x = tinyLM.emb.forward(tokens)                   # [D_MODEL, SEQ_LEN]
        x = g.ag_add(x, g.ag_tensor(PE))                 # + positional encoding
        x = tinyLM.encoder.forward(x, causal_mask=causal_mask)
        return g.ag_matmul(tinyLM.W_head, x)             # [VOCAB_SIZE, SEQ_LEN]
    tinyLM.forward = forward
    tinyLM.parameters = lambda: ([tinyLM.W_head] + tinyLM.emb.parameters() + tinyLM.encoder.parameters())

    # 7. Parameter count
    all_params = tinyLM.parameters()
    n_params = sum(p.size for p in all_params)
    print(f"Model parameters: {n_params}  ({len(all_params)} tensors)")

    # 8. Optimizer
    opt = g.optimizer_adam(all_params, lr=LR)

    # 9. Training loop
    print("\nTraining loop (causal LM, cross-entropy):")
    print(f"  {'iter':<6}  {'loss':<10}")
    print("-" * 22)
    g.ag_train(tinyLM.encoder)
    loss_history = np.zeros(N_ITER)
    for it in range(1, N_ITER + 1):
        epoch_loss = 0.0
        for tokens in train_seqs:
            targets = np.concatenate([tokens[1:], [0]])   # length SEQ_LEN
            with g.with_grad_tape():
                logits = tinyLM.forward(tokens, causal_mask=True)
                loss = g.ag_softmax_cross_entropy_loss(logits, targets)
            grads = g.backward(loss)

            # Gradient clipping: scale all grads if the global norm exceeds CLIP_NORM
            param_ids = [p.id for p in all_params]
            gs = [grads.get(pid) for pid in param_ids]
            global_norm = math.sqrt(sum(0 if gr is None else float(np.sum(gr.data ** 2)) for gr in gs))
            if not math.isnan(global_norm) and global_norm > CLIP_NORM:
                scale_factor = CLIP_NORM / global_norm
                for pid in param_ids:
                    gr = grads.get(pid)
                    if gr is not None:
                        grads[pid] = gr * scale_factor

            opt.step(grads)
            opt.zero_grad()
            lv = float(loss.data[0, 0])
            if not math.isnan(lv):
                epoch_loss += lv
        loss_history[it - 1] = epoch_loss / N_SEQS
        if it % 10 == 0 or it == 1:
            print(f"  {it:<6d}  {loss_history[it - 1]:.6f}")

    # 11. Summary
    print("-" * 22)
    print(f"Loss: {loss_history[0]:.4f} → {loss_history[-1]:.4f}  (delta = {loss_history[0] - loss_history[-1]:.4f})")
    if not math.isnan(loss_history[-1]) and loss_history[-1] < loss_history[0]:
        print("Training converged.")
    else:
        print("Warning: loss did not decrease. Check LR or increase N_ITER.")

    # 12. Inference demo
    g.ag_eval(tinyLM.encoder)
    print("\nInference demo (greedy next-token prediction):")
    prompt_tokens = rng.integers(0, VOCAB_SIZE, 4)
    print("  Prompt:    [", " ".join(map(str, prompt_tokens)), "]")
    logits_inf = tinyLM.forward(np.concatenate([prompt_tokens, [0] * (SEQ_LEN - 4)]), causal_mask=False)
    predicted_tokens = np.argmax(logits_inf.data, axis=0)
    print("  Predicted: [", " ".join(map(str, predicted_tokens)), "]")
    print("\nDone.")
    return loss_history, n_params, len(all_params), [p.dtype for p in all_params], tinyLM


@pytest.fixture
def restore_device():
    yield
    g.ag_dtype("f32")
    g.ag_device("cpu")


def test_transformer_encoder_demo_f16_path_trains(capsys, restore_device):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # "no GPU here; computing on the CPU"
        h16, n_params, n_tensors, dtypes, lm = transformer_encoder_demo()
    out = capsys.readouterr().out
    assert "Dtype:  f16 (mixed precision)" in out and set(dtypes) == {"f16"}
    # W_head 512 + embedding 512 + 2 layer norms 128 + attention 4*1024 + 32 + feed-forward 4192
    assert n_params == 9472 and n_tensors == 15 and f"Model parameters: {n_params}  (15 tensors)" in out
    assert np.all(np.isfinite(h16)) and "Training converged." in out
    assert h16[-1] < 0.5 * h16[0]
    assert all(np.all(np.isfinite(p.numpy())) for p in lm.parameters())

    g.ag_dtype("f32")
    g.ag_device("cpu")
    h32, *_ = transformer_encoder_demo(gpu_raises=True)   # ggmlR's CPU path: f32
    assert "Dtype:  f32" in capsys.readouterr().out
    assert np.all(np.isfinite(h32)) and h32[-1] < 0.5 * h32[0]
    np.testing.assert_allclose(h16[0], h32[0], rtol=1e-2)                 # the same start
    np.testing.assert_allclose(h16, h32, rtol=0.15, atol=0.05)            # and the same curve, in f16
