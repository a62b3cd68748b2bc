"""Tiny random llama.cpp model files, written with the `gguf` package (llama.cpp's own writer),
and the weights they hold as the numpy reference (llama_reference.llama_forward) takes them.

The weights are drawn in Hugging Face's layout (each head's query and key rows rotated in halves,
NeoX's pairs) and written as llama.cpp's conversion writes them: attn_q and attn_k rows permuted
(convert_hf_to_gguf's LlamaModel.permute), so that llama.cpp's "normal" rotation computes the
same model."""
import numpy as np

from llama_reference import hf_to_normal_rows

gguf = None  # imported by write_llama (tests needing it skip where the package is missing)

_PROJ = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
_REF = {"attn_q": "wq", "attn_k": "wk", "attn_v": "wv", "attn_output": "wo", "ffn_gate": "w_gate",
        "ffn_up": "w_up", "ffn_down": "w_down"}


def hf_weights(rng, vocab, d, n_layers, n_head, n_head_kv, ff, tied):
    """Weights [out, in] in Hugging Face's layout (norm weights away from 1)."""
    hd = d // n_head

    def w(o, i):
        return rng.normal(0.0, 1.0 / np.sqrt(i), size=(o, i))
    p = {"tok_embd": rng.normal(0.0, 1.0, size=(d, vocab)), "output_norm": rng.uniform(0.5, 1.5, d),
         "output": None if tied else w(vocab, d), "layers": []}
    for _ in range(n_layers):
        p["layers"].append({"attn_norm": rng.uniform(0.5, 1.5, d), "wq": w(d, d), "wk": w(hd * n_head_kv, d),
                            "wv": w(hd * n_head_kv, d), "wo": w(d, d), "ffn_norm": rng.uniform(0.5, 1.5, d),
                            "w_gate": w(ff, d), "w_up": w(ff, d), "w_down": w(d, ff)})
    return p


def write_llama(path, p, n_head, n_head_kv, qtype="f32", eps=1e-5, freq_base=10000.0, context=64):
    """Write HF-layout weights `p` as a llama.cpp `llama` GGUF with projections (and the token
    table) in `qtype` ("f32", "f16", "q8_0", ...); returns the weights as the file holds them
    (q/k rows permuted, values as stored), in the reference's layout."""
    global gguf
    import gguf as _gguf
    gguf = _gguf
    d, vocab = p["tok_embd"].shape
    ff = p["layers"][0]["w_gate"].shape[0]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(context)
    w.add_embedding_length(d)
    w.add_block_count(len(p["layers"]))
    w.add_feed_forward_length(ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_freq_base(freq_base)
    w.add_layer_norm_rms_eps(eps)
    w.add_rope_dimension_count(d // n_head)
    w.add_vocab_size(vocab)
    w.add_file_type({"f32": 0, "f16": 1, "q8_0": 7, "q4_0": 2, "bf16": 32, "q4_K": 15}[qtype])
    _add_vocab(w, vocab)
    stored = {"layers": []}

    def add(name, arr, typed):
        arr = np.asarray(arr, dtype=np.float32)
        if not typed or qtype == "f32":
            w.add_tensor(name, arr)
            return arr.astype(np.float64)
        if qtype == "f16":
            w.add_tensor(name, arr.astype(np.float16))
            return arr.astype(np.float16).astype(np.float64)
        t = getattr(gguf.GGMLQuantizationType, qtype.upper() if qtype[-2:] != "_K" else qtype[:-2].upper() + "_K")
        try:
            q = gguf.quants.quantize(arr, t)
        except NotImplementedError:  # gguf-py has no quantizer for the k-quants: ggml's own writes the blocks
            from ggmlpy import ggml_quantize_chunk
            q = ggml_quantize_chunk(int(t), np.ascontiguousarray(arr.reshape(-1, arr.shape[-1])), arr.size //
                                    arr.shape[-1], arr.shape[-1]).reshape(*arr.shape[:-1], -1)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)
        return gguf.quants.dequantize(q, t).astype(np.float64)

    stored["tok_embd"] = add("token_embd.weight", p["tok_embd"].T, True).T  # ne [d, vocab]
    for i, L in enumerate(p["layers"]):
        S = {}
        S["attn_norm"] = add(f"blk.{i}.attn_norm.weight", L["attn_norm"], False)
        for name in _PROJ:
            W = L[_REF[name]]
            if name == "attn_q":
                W = hf_to_normal_rows(W, n_head)
            elif name == "attn_k":
                W = hf_to_normal_rows(W, n_head_kv)
            S[_REF[name]] = add(f"blk.{i}.{name}.weight", W, True)  # numpy (out, in) is ne [in, out]
        S["ffn_norm"] = add(f"blk.{i}.ffn_norm.weight", L["ffn_norm"], False)
        stored["layers"].append(S)
    stored["output_norm"] = add("output_norm.weight", p["output_norm"], False)
    stored["output"] = None if p["output"] is None else add("output.weight", p["output"], True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


def _add_vocab(w, vocab):
    """A SentencePiece-style vocabulary llama.cpp accepts: <unk>, <s>, </s>, then pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(vocab - 3)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([2, 3, 3] + [1] * (vocab - 3))  # unknown, control, control, normal
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
