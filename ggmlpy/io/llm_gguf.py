"""A llama.cpp model file's architecture: its hyper-parameters from the GGUF metadata, under
llama.cpp's key names (`{arch}.embedding_length`, `{arch}.attention.head_count`, ...), and the
tensors it must hold, under llama.cpp's tensor names (`token_embd.weight`, `blk.N.attn_q.weight`,
...), checked against each other before any weight is read. What builds a model from them lives
with the models (quant/llm.py); this module only reads and checks the file."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import GGMLError
from .gguf_file import GGUFFile
from .model_file import DIGEST_KEY, digest

# architecture -> the rotation llama.cpp applies (ggml's rope mode: 0 normal, 2 NeoX; None: no
# rotation, learned positions instead)
SUPPORTED = {"llama": 0, "gpt2": None}

# a llama layer's tensors: llama.cpp's name -> (ne as a function of the hyper-parameters)
_LAYER_TENSORS = {
    "attn_norm": lambda h: [h.d_model],
    "attn_q": lambda h: [h.d_model, h.d_model],
    "attn_k": lambda h: [h.d_model, h.head_dim * h.n_kv_heads],
    "attn_v": lambda h: [h.d_model, h.head_dim * h.n_kv_heads],
    "attn_output": lambda h: [h.d_model, h.d_model],
    "ffn_norm": lambda h: [h.d_model],
    "ffn_gate": lambda h: [h.d_model, h.d_ff],
    "ffn_up": lambda h: [h.d_model, h.d_ff],
    "ffn_down": lambda h: [h.d_ff, h.d_model],
}
LAYER_TENSOR_NAMES = tuple(_LAYER_TENSORS)

# a gpt2 layer's tensors (llama.cpp's gpt2 graph: LayerNorm with bias, one fused query-key-value
# projection, biased projections, GELU feed-forward), under their full names past "blk.N."
_GPT2_LAYER_TENSORS = {
    "attn_norm.weight": lambda h: [h.d_model], "attn_norm.bias": lambda h: [h.d_model],
    "attn_qkv.weight": lambda h: [h.d_model, h.d_model + 2 * h.head_dim * h.n_kv_heads],
    "attn_qkv.bias": lambda h: [h.d_model + 2 * h.head_dim * h.n_kv_heads],
    "attn_output.weight": lambda h: [h.d_model, h.d_model], "attn_output.bias": lambda h: [h.d_model],
    "ffn_norm.weight": lambda h: [h.d_model], "ffn_norm.bias": lambda h: [h.d_model],
    "ffn_up.weight": lambda h: [h.d_model, h.d_ff], "ffn_up.bias": lambda h: [h.d_ff],
    "ffn_down.weight": lambda h: [h.d_ff, h.d_model], "ffn_down.bias": lambda h: [h.d_model],
}


@dataclass
class LlmHParams:
    """What a llama.cpp model file says of its model (ggmlpy's names; llama.cpp's keys in `read`)."""

    arch: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    context: int
    rope_base: float
    rope_mode: int | None  # None: no rotation (gpt2's learned positions)
    eps: float
    tied: bool
    vocab: dict = field(default_factory=dict, repr=False)  # the tokenizer.* metadata, as the file has it

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


def _key(meta: dict, path: str, key: str, kind, default=None):
    if key not in meta:
        if default is None:
            raise GGMLError(f"{path}: the model file has no {key!r}, which llama.cpp requires")
        return default
    v = meta[key]
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (kind is float or float(v).is_integer())
    if not ok or (kind is int and v < 1) or (kind is float and not math.isfinite(v)):
        raise GGMLError(f"{path}: {key} = {v!r} is not a valid {'positive integer' if kind is int else 'number'}")
    return kind(v)


def read_hparams(f: GGUFFile) -> LlmHParams:
    """The file's hyper-parameters, every tensor it needs present with the shape they imply."""
    meta, path = f.metadata, f.path
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise GGMLError(f"{path}: no general.architecture: not a llama.cpp model file")
    if arch not in SUPPORTED:
        raise GGMLError(f"{path}: architecture {arch!r} is not supported (supported: {', '.join(SUPPORTED)})")
    if meta.get("general.type", "model") != "model":
        raise GGMLError(f"{path}: general.type is {meta['general.type']!r}, not a model")
    if "token_embd.weight" not in f.tensors:
        raise GGMLError(f"{path}: no tensor 'token_embd.weight'")
    emb = f.tensors["token_embd.weight"].ne
    d_model = _key(meta, path, f"{arch}.embedding_length", int)
    n_heads = _key(meta, path, f"{arch}.attention.head_count", int)
    h = LlmHParams(
        arch=arch, vocab_size=_key(meta, path, f"{arch}.vocab_size", int, emb[-1]), d_model=d_model,
        n_layers=_key(meta, path, f"{arch}.block_count", int), n_heads=n_heads,
        n_kv_heads=_key(meta, path, f"{arch}.attention.head_count_kv", int, n_heads),
        d_ff=_key(meta, path, f"{arch}.feed_forward_length", int),
        context=_key(meta, path, f"{arch}.context_length", int),
        rope_base=_key(meta, path, f"{arch}.rope.freq_base", float, 10000.0), rope_mode=SUPPORTED[arch],
        eps=_key(meta, path, f"{arch}.attention.layer_norm_{'rms_' if arch == 'llama' else ''}epsilon", float),
        tied="output.weight" not in f.tensors,
        vocab={k: v for k, v in meta.items() if k.startswith("tokenizer.")})
    if d_model % n_heads or n_heads % h.n_kv_heads or (h.rope_mode is not None and h.head_dim % 2):
        raise GGMLError(f"{path}: {n_heads} heads ({h.n_kv_heads} key/value heads) do not divide "
                        f"embedding_length {d_model} into heads of even size")
    _unsupported(meta, path, arch, h)
    _check_tensors(f, h)
    if DIGEST_KEY in meta and digest(f, every_key=True) != meta[DIGEST_KEY]:  # a file llm_save wrote
        raise GGMLError(f"{path}: the file's weights or metadata do not match the digest llm_save wrote with "
                        "them: the file is damaged or was changed after it was saved")
    return h


def _unsupported(meta: dict, path: str, arch: str, h: LlmHParams) -> None:
    """Refuse what the model would otherwise compute differently from llama.cpp."""
    for key, want in ((f"{arch}.rope.dimension_count", h.head_dim), (f"{arch}.attention.key_length", h.head_dim),
                      (f"{arch}.attention.value_length", h.head_dim)):
        if key in meta and meta[key] != want:
            raise GGMLError(f"{path}: {key} = {meta[key]} (only {want}, the head size, is supported)")
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling != "none" or meta.get(f"{arch}.rope.scale_linear", 1.0) != 1.0:
        raise GGMLError(f"{path}: rope scaling {scaling!r} is not supported")
    if h.eps < 0:
        raise GGMLError(f"{path}: {arch}.attention.layer_norm_rms_epsilon = {h.eps} is negative")
    if meta.get(f"{arch}.expert_count", 0):
        raise GGMLError(f"{path}: mixture-of-experts models are not supported")


def _check_tensors(f: GGUFFile, h: LlmHParams) -> None:
    want = {"token_embd.weight": [h.d_model, h.vocab_size], "output_norm.weight": [h.d_model]}
    if not h.tied:
        want["output.weight"] = [h.d_model, h.vocab_size]
    for i in range(h.n_layers):
        if h.arch == "gpt2":
            want.update((f"blk.{i}.{name}", shape(h)) for name, shape in _GPT2_LAYER_TENSORS.items())
        else:
            want.update((f"blk.{i}.{name}.weight", shape(h)) for name, shape in _LAYER_TENSORS.items())
    if h.arch == "gpt2":
        want["position_embd.weight"] = [h.d_model, h.context]
        want["output_norm.bias"] = [h.d_model]
    for name, shape in want.items():
        if name not in f.tensors:
            raise GGMLError(f"{f.path}: no tensor {name!r}, which a {h.arch} model of these hyper-parameters needs")
        if list(f.tensors[name].ne) != shape:
            raise GGMLError(f"{f.path}: tensor {name!r} has shape {list(f.tensors[name].ne)}, expected {shape}")
    extra = sorted(set(f.tensors) - set(want))
    if extra:
        # e.g. rope_freqs.weight (llama 3's frequency factors), which ggmlpy's rope does not apply
        raise GGMLError(f"{f.path}: tensors this loader does not know what to do with: {extra[:8]}"
                        + (" ..." if len(extra) > 8 else ""))
