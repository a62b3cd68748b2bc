"""Tiny random llama.cpp `gpt2` model files, written with the `gguf` package, and a numpy reference
of the architecture as llama.cpp computes it (LayerNorm with bias, fused query-key-value
projection, causal attention, ggml_gelu's tanh form rounded through f16 as ggml's CPU table
does, learned positions). Arrays in ggmlpy's layout: a column is a token, weights [out, in]."""
import numpy as np

from llm_files import _add_vocab

_PROJ = ("attn_qkv", "attn_output", "ffn_up", "ffn_down")


def gpt2_weights(rng, vocab, d, n_layers, ff, context, tied, n_kv=None):
    """Weights [out, in] and vectors; norm weights away from 1, biases away from 0."""
    kv = d if n_kv is None else n_kv

    def w(o, i):
        return rng.normal(0.0, 1.0 / np.sqrt(i), size=(o, i))

    def v(n, s=0.1):
        return rng.normal(0.0, s, size=n)
    p = {"tok_embd": rng.normal(0.0, 1.0, size=(d, vocab)), "pos_embd": rng.normal(0.0, 0.5, size=(d, context)),
         "output_norm": rng.uniform(0.5, 1.5, d), "output_norm_b": v(d), "output": None if tied else w(vocab, d),
         "layers": []}
    for _ in range(n_layers):
        p["layers"].append({"attn_norm": rng.uniform(0.5, 1.5, d), "attn_norm_b": v(d),
                            "attn_qkv": w(d + 2 * kv, d), "attn_qkv_b": v(d + 2 * kv),
                            "attn_output": w(d, d), "attn_output_b": v(d),
                            "ffn_norm": rng.uniform(0.5, 1.5, d), "ffn_norm_b": v(d),
                            "ffn_up": w(ff, d), "ffn_up_b": v(ff), "ffn_down": w(d, ff), "ffn_down_b": v(d)})
    return p


def write_gpt2(path, p, n_head, qtype="f32", eps=1e-5, n_head_kv=None):
    """Write `p` as a llama.cpp `gpt2` GGUF, 2-D weights (token table, projections, head) in
    `qtype`, vectors and the position table in f32; returns the weights as the file holds them."""
    import gguf
    d, vocab = p["tok_embd"].shape
    context = p["pos_embd"].shape[1]
    ff = p["layers"][0]["ffn_up"].shape[0]
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_name("tiny")
    w.add_context_length(context)
    w.add_embedding_length(d)
    w.add_block_count(len(p["layers"]))
    w.add_feed_forward_length(ff)
    w.add_head_count(n_head)
    if n_head_kv is not None:
        w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_eps(eps)
    w.add_vocab_size(vocab)
    w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7, "q4_K": 15}[qtype])
    _add_vocab(w, vocab)

    def add(name, arr, typed):
        arr = np.asarray(arr, dtype=np.float32)
        if not typed or qtype == "f32":
            w.add_tensor(name, arr)
            return arr.astype(np.float64)
        if qtype == "f16":
            w.add_tensor(name, arr.astype(np.float16))
            return arr.astype(np.float16).astype(np.float64)
        t = gguf.GGMLQuantizationType.Q8_0 if qtype == "q8_0" else gguf.GGMLQuantizationType.Q4_K
        from ggmlpy import ggml_quantize_chunk  # ggml's own quantizer (gguf-py has none for the k-quants)
        q = ggml_quantize_chunk(int(t), np.ascontiguousarray(arr), arr.shape[0], arr.shape[1])
        q = q.reshape(arr.shape[0], -1)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)
        return gguf.quants.dequantize(q, t).astype(np.float64)

    s = {"tok_embd": add("token_embd.weight", p["tok_embd"].T, True).T,
         "pos_embd": add("position_embd.weight", p["pos_embd"].T, False).T, "layers": []}
    for i, L in enumerate(p["layers"]):
        S = {}
        for name in ("attn_norm", "ffn_norm"):
            S[name] = add(f"blk.{i}.{name}.weight", L[name], False)
            S[name + "_b"] = add(f"blk.{i}.{name}.bias", L[name + "_b"], False)
        for name in _PROJ:
            S[name] = add(f"blk.{i}.{name}.weight", L[name], True)  # numpy (out, in) is ne [in, out]
            S[name + "_b"] = add(f"blk.{i}.{name}.bias", L[name + "_b"], False)
        s["layers"].append(S)
    s["output_norm"] = add("output_norm.weight", p["output_norm"], False)
    s["output_norm_b"] = add("output_norm.bias", p["output_norm_b"], False)
    s["output"] = None if p["output"] is None else add("output.weight", p["output"], True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return s


def layer_norm(x, eps, gamma, beta):
    m = x.mean(axis=0, keepdims=True)
    var = ((x - m) ** 2).mean(axis=0, keepdims=True)
    return (x - m) / np.sqrt(var + eps) * gamma[:, None] + beta[:, None]


def ggml_gelu(x):
    """ggml_gelu on the CPU: the tanh form at the input rounded to f16, the result rounded to f16
    (ggml's table), exact beyond +-10."""
    x = np.asarray(x, dtype=np.float32)
    h = x.astype(np.float16).astype(np.float32)
    y = (np.float32(0.5) * h * (np.float32(1) + np.tanh(np.float32(np.sqrt(2 / np.pi)) * h *
                                                         (np.float32(1) + np.float32(0.044715) * h * h))))
    y = y.astype(np.float16).astype(np.float64)
    return np.where(x <= -10, 0.0, np.where(x >= 10, x, y))


def gelu_tanh(x):
    """The tanh form without rounding."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gpt2_forward(p, tokens, n_head, eps=1e-5, gelu=ggml_gelu, n_head_kv=None):
    """Logits [vocab, T] for one sequence of token ids."""
    x = p["tok_embd"][:, np.asarray(tokens)] + p["pos_embd"][:, :len(tokens)]
    d, t = x.shape
    hd = d // n_head
    n_kv = n_head if n_head_kv is None else n_head_kv
    kv = hd * n_kv
    causal = np.tril(np.ones((t, t), dtype=bool), -1)
    for L in p["layers"]:
        h = layer_norm(x, eps, L["attn_norm"], L["attn_norm_b"])
        qkv = L["attn_qkv"] @ h + L["attn_qkv_b"][:, None]
        q = qkv[:d].reshape(hd, n_head, t, order="F")
        k = qkv[d:d + kv].reshape(hd, n_kv, t, order="F")
        v = qkv[d + kv:].reshape(hd, n_kv, t, order="F")
        heads = np.empty((hd, n_head, t))
        for i in range(n_head):
            j = i // (n_head // n_kv)
            sc = k[:, j, :].T @ q[:, i, :] / np.sqrt(hd)
            sc[causal] = -np.inf
            e = np.exp(sc - sc.max(axis=0, keepdims=True))
            heads[:, i, :] = v[:, j, :] @ (e / e.sum(axis=0, keepdims=True))
        x = x + L["attn_output"] @ heads.reshape(d, t, order="F") + L["attn_output_b"][:, None]
        h = layer_norm(x, eps, L["ffn_norm"], L["ffn_norm_b"])
        x = x + L["ffn_down"] @ gelu(L["ffn_up"] @ h + L["ffn_up_b"][:, None]) + L["ffn_down_b"][:, None]
    out = p["output"] if p.get("output") is not None else p["tok_embd"].T
    return out @ layer_norm(x, eps, p["output_norm"], p["output_norm_b"])
