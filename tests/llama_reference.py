"""A numpy reference of the llama architecture as llama.cpp computes it: RMSNorm, rotary position
embedding (llama.cpp's "normal" pairs for `llama`, NeoX's halves), grouped-query causal attention,
SwiGLU. Arrays in ggmlpy's layout: axis 0 is ggml's ne0 (a column is a token), weights [out, in]."""
import numpy as np


def rms_norm(x, eps, gamma=None):
    y = x / np.sqrt(np.mean(x * x, axis=0, keepdims=True) + eps)
    return y if gamma is None else y * gamma.reshape(-1, *([1] * (x.ndim - 1)))


def rope(x, pos=None, n_dims=None, mode=0, freq_base=10000.0, freq_scale=1.0):
    """x [head_dim, n_head, T, ...]: each head's first n_dims entries rotated in pairs by
    pos * freq_scale * freq_base^(-2i/n_dims); mode 0 pairs (2i, 2i+1), mode 2 (i, i + n_dims/2)."""
    x = np.asarray(x, dtype=np.float64)
    hd, t = x.shape[0], x.shape[2]
    n_dims = hd if n_dims is None else n_dims
    pos = np.arange(t) if pos is None else np.asarray(pos, dtype=np.float64).ravel()
    theta = freq_scale * pos[None, :] * freq_base ** (-2.0 * np.arange(n_dims // 2)[:, None] / n_dims)  # [n/2, T]
    cos, sin = np.cos(theta), np.sin(theta)
    cos = cos.reshape(cos.shape[0], 1, t, *([1] * (x.ndim - 3)))
    sin = sin.reshape(cos.shape)
    out = x.copy()
    if mode == 0:
        a, b = x[0:n_dims:2], x[1:n_dims:2]
        out[0:n_dims:2], out[1:n_dims:2] = a * cos - b * sin, a * sin + b * cos
    else:
        h = n_dims // 2
        a, b = x[:h], x[h:n_dims]
        out[:h], out[h:n_dims] = a * cos - b * sin, a * sin + b * cos
    return out


def hf_to_normal_rows(w, n_head):
    """A [n_head * head_dim, in] projection whose heads are rotated in halves (Hugging Face's
    rotate_half, NeoX's pairs) reordered so that llama.cpp's "normal" pairs rotate the same
    values: llama.cpp's convert_hf_to_gguf LlamaModel.permute, in [out, in] layout."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def softmax0(x):
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def silu(x):
    return x / (1 + np.exp(-x))


def llama_forward(p, tokens, n_head, n_head_kv, eps=1e-5, freq_base=10000.0, mode=0, kv_head_of=None):
    """Logits [vocab, T] for one sequence of token ids. p: tok_embd [d, vocab], per layer (list
    p["layers"]) attn_norm [d], wq [d, d], wk, wv [d_kv, d], wo [d, d], ffn_norm [d], w_gate, w_up
    [ff, d], w_down [d, ff]; output_norm [d], output [vocab, d] (None: tied to tok_embd).
    kv_head_of(i): the key/value head of query head i (llama.cpp's: consecutive query heads share one)."""
    x = p["tok_embd"][:, np.asarray(tokens)].astype(np.float64)  # [d, T]
    d, t = x.shape
    hd = d // n_head
    group = n_head // n_head_kv
    causal = np.tril(np.ones((t, t), dtype=bool), -1)  # [key, query]: True where the key comes after the query
    for L in p["layers"]:
        h = rms_norm(x, eps, L["attn_norm"])
        # output row o is entry o % hd of head o // hd (column-major, as ggml lays out [d, T])
        q = rope((L["wq"] @ h).reshape(hd, n_head, t, order="F"), None, hd, mode, freq_base)
        k = rope((L["wk"] @ h).reshape(hd, n_head_kv, t, order="F"), None, hd, mode, freq_base)
        v = (L["wv"] @ h).reshape(hd, n_head_kv, t, order="F")
        heads = np.empty((hd, n_head, t))
        for i in range(n_head):
            j = i // group if kv_head_of is None else kv_head_of(i)
            s = k[:, j, :].T @ q[:, i, :] / np.sqrt(hd)  # [T_k, T_q]
            s[causal] = -np.inf
            heads[:, i, :] = v[:, j, :] @ softmax0(s)
        x = x + L["wo"] @ heads.reshape(d, t, order="F")
        h = rms_norm(x, eps, L["ffn_norm"])
        x = x + L["w_down"] @ (silu(L["w_gate"] @ h) * (L["w_up"] @ h))
    out = p["output"] if p.get("output") is not None else p["tok_embd"].T
    return out @ rms_norm(x, eps, p["output_norm"])
