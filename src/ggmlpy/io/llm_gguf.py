"""A llama.cpp model file's architecture: its hyper-parameters from the GGUF metadata, under
llama.cpp's key names (`{arch}.embedding_length`, `{arch}.attention.head_count`, ...), and the
tensors it must hold, under llama.cpp's tensor names (`token_embd.weight`, `blk.N.attn_q.weight`,
...), checked against each other before any weight is read. The same tables name what a file
being written holds (`hparam_keys`, `tensor_shapes`), so that what llm_save writes is what
llm_load reads. What builds a model from them, or gathers one into them, lives with the models
(quant/llm.py, quant/llm_export.py); this module only names, reads and checks."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import GGMLError
from .gguf_file import GGUFFile
from .model_file import DIGEST_KEY, digest

# architecture -> the rotation llama.cpp applies (ggml's rope mode: 0 normal, 2 NeoX; None: no
# rotation, learned positions instead)
SUPPORTED = {"llama": 0, "gpt2": None}

# each architecture's layer tensors, under their names past "blk.N.": ne as a function of the
# hyper-parameters. llama: RMSNorm, separate projections, SwiGLU; gpt2 (llama.cpp's gpt2 graph):
# LayerNorm with bias, one fused query-key-value projection, biased projections, GELU.
_LAYER_TENSORS = {
    "llama": {
        "attn_norm.weight": lambda h: [h.d_model],
        "attn_q.weight": lambda h: [h.d_model, h.d_model],
        "attn_k.weight": lambda h: [h.d_model, h.head_dim * h.n_kv_heads],
        "attn_v.weight": lambda h: [h.d_model, h.head_dim * h.n_kv_heads],
        "attn_output.weight": lambda h: [h.d_model, h.d_model],
        "ffn_norm.weight": lambda h: [h.d_model],
        "ffn_gate.weight": lambda h: [h.d_model, h.d_ff],
        "ffn_up.weight": lambda h: [h.d_model, h.d_ff],
        "ffn_down.weight": lambda h: [h.d_ff, h.d_model],
    },
    "gpt2": {
        "attn_norm.weight": lambda h: [h.d_model], "attn_norm.bias": lambda h: [h.d_model],
        "attn_qkv.weight": lambda h: [h.d_model, h.d_model + 2 * h.head_dim * h.n_kv_heads],
        "attn_qkv.bias": lambda h: [h.d_model + 2 * h.head_dim * h.n_kv_heads],
        "attn_output.weight": lambda h: [h.d_model, h.d_model], "attn_output.bias": lambda h: [h.d_model],
        "ffn_norm.weight": lambda h: [h.d_model], "ffn_norm.bias": lambda h: [h.d_model],
        "ffn_up.weight": lambda h: [h.d_model, h.d_ff], "ffn_up.bias": lambda h: [h.d_ff],
        "ffn_down.weight": lambda h: [h.d_ff, h.d_model], "ffn_down.bias": lambda h: [h.d_model],
    },
}
# each architecture's layer projections by llama.cpp's names: the weights its graph multiplies
# through build_lora_mm, so the ones a LoRA adapter may adapt
PROJECTIONS = {arch: tuple(n[:-len(".weight")] for n in tensors if n.endswith(".weight") and "_norm." not in n)
               for arch, tensors in _LAYER_TENSORS.items()}

# LlmHParams' fields -> llama.cpp's keys past "{arch}." (eps's key differs by architecture);
# head_dim: the rotated dimensions, all of a head's (the one case supported)
_KEYS = {"vocab_size": "vocab_size", "context": "context_length", "d_model": "embedding_length",
         "n_layers": "block_count", "d_ff": "feed_forward_length", "n_heads": "attention.head_count",
         "n_kv_heads": "attention.head_count_kv", "rope_base": "rope.freq_base", "head_dim": "rope.dimension_count"}
_EPS_KEYS = {"llama": "attention.layer_norm_rms_epsilon", "gpt2": "attention.layer_norm_epsilon"}


def hparam_key(arch: str, field: str) -> str:
    """llama.cpp's metadata key of the LlmHParams field `field` in a file of architecture `arch`."""
    return f"{arch}.{_EPS_KEYS[arch] if field == 'eps' else _KEYS[field]}"


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

    def key(field, kind, default=None):
        return _key(meta, path, hparam_key(arch, field), kind, default)
    n_heads = key("n_heads", int)
    h = LlmHParams(
        arch=arch, vocab_size=key("vocab_size", int, emb[-1]), d_model=key("d_model", int),
        n_layers=key("n_layers", int), n_heads=n_heads, n_kv_heads=key("n_kv_heads", int, n_heads),
        d_ff=key("d_ff", int), context=key("context", int), rope_base=key("rope_base", float, 10000.0),
        rope_mode=SUPPORTED[arch], eps=key("eps", float), tied="output.weight" not in f.tensors,
        vocab={k: v for k, v in meta.items() if k.startswith("tokenizer.")})
    if h.d_model % n_heads or n_heads % h.n_kv_heads or (h.rope_mode is not None and h.head_dim % 2):
        raise GGMLError(f"{path}: {n_heads} heads ({h.n_kv_heads} key/value heads) do not divide "
                        f"embedding_length {h.d_model} into heads of even size")
    _unsupported(meta, path, arch, h)
    _check_tensors(f, h)
    if DIGEST_KEY in meta and digest(f, every_key=True) != meta[DIGEST_KEY]:  # a file llm_save wrote
        raise GGMLError(f"{path}: the file's weights or metadata do not match the digest llm_save wrote with "
                        "them: the file is damaged or was changed after it was saved")
    return h


def _unsupported(meta: dict, path: str, arch: str, h: LlmHParams) -> None:
    """Refuse what the model would otherwise compute differently from llama.cpp."""
    for key, want in ((hparam_key(arch, "head_dim"), h.head_dim), (f"{arch}.attention.key_length", h.head_dim),
                      (f"{arch}.attention.value_length", h.head_dim)):
        if key in meta and meta[key] != want:
            raise GGMLError(f"{path}: {key} = {meta[key]} (only {want}, the head size, is supported)")
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling != "none" or meta.get(f"{arch}.rope.scale_linear", 1.0) != 1.0:
        raise GGMLError(f"{path}: rope scaling {scaling!r} is not supported")
    if h.eps < 0:
        raise GGMLError(f"{path}: {hparam_key(arch, 'eps')} = {h.eps} is negative")
    if meta.get(f"{arch}.expert_count", 0):
        raise GGMLError(f"{path}: mixture-of-experts models are not supported")


def hparam_keys(h: LlmHParams) -> dict:
    """The metadata a file of h's architecture says h with, under the keys read_hparams reads."""
    fields = ["vocab_size", "context", "d_model", "n_layers", "d_ff", "n_heads", "n_kv_heads", "eps"]
    if h.rope_mode is not None:
        fields += ["head_dim", "rope_base"]
    return {hparam_key(h.arch, name): getattr(h, name) for name in fields}


def tensor_shapes(h: LlmHParams) -> dict:
    """{llama.cpp's tensor name: ne} of every tensor a file of these hyper-parameters holds, in
    the order llm_save writes them: embeddings, layer by layer, the output norm and head."""
    gpt2 = h.arch == "gpt2"
    want = {"token_embd.weight": [h.d_model, h.vocab_size]}
    if gpt2:
        want["position_embd.weight"] = [h.d_model, h.context]
    for i in range(h.n_layers):
        want.update((f"blk.{i}.{name}", shape(h)) for name, shape in _LAYER_TENSORS[h.arch].items())
    want["output_norm.weight"] = [h.d_model]
    if gpt2:
        want["output_norm.bias"] = [h.d_model]
    if not h.tied:
        want["output.weight"] = [h.d_model, h.vocab_size]
    return want


def _check_tensors(f: GGUFFile, h: LlmHParams) -> None:
    want = tensor_shapes(h)
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
