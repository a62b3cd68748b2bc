"""LoRA on an ag_llama or an ag_gpt2, as llama.cpp applies and stores it: `ag_lora(model, rank=,
alpha=, targets=)` adds to each chosen layer projection W (named as llama.cpp names its tensors:
llama's attn_q, ..., ffn_down; gpt2's attn_qkv, attn_output, ffn_up, ffn_down: the weights
llama.cpp's graphs multiply through build_lora_mm) two trained matrices, lora_a [rank, in] and
lora_b [out, rank], so that the projection computes

    W %*% x + (alpha / rank) * lora_b %*% (lora_a %*% x)

in that order, as llama.cpp's build_lora_mm does (a projection's bias, gpt2's, is added to that
sum). Everything else is frozen: the model's parameters become the adapters alone
(`lora_parameters`), and a base weight held in a quantized type stays in it (its product's
backward gives the activations their gradient through ggml's out_prod on the quantized blocks:
no f32 copy of it is ever made; an f16 or bf16 weight is converted to f32 one product at a time
in the backward pass). lora_b starts at zero, so the adapted model starts as the base model;
lora_a is drawn as PEFT draws it (uniform in ±1/sqrt(in)).

`llm_save_lora` writes the adapters as llama.cpp's LoRA adapter file (llama-adapter.cpp):
`general.type` "adapter", `adapter.type` "lora", `adapter.lora.alpha`, and per adapted weight
`<name>.lora_a` (ne [in, rank]) and `<name>.lora_b` (ne [rank, out]), f32, under the model's
architecture (`general.architecture` llama or gpt2); llama.cpp scales them by alpha / rank (its
rank: lora_b's ne[0]); `llm_load_lora` reads such a file back onto a model of that architecture.
`lora_merge` adds the adapters into f32 weights and ends LoRA: the model is a plain ag_llama or
ag_gpt2 again, trainable as before.
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from .. import random as grandom
from ..autograd import ops
from ..errors import GGMLError, checked_path
from ..io.gguf_file import GGUFFile
from ..io.llm_gguf import PROJECTIONS
from ..io.llm_write import write_llm_gguf
from ..io.model_file import DIGEST_KEY, digest
from ..nn.gpt2 import ag_gpt2
from ..nn.module import Module
from ..nn.llama import LlamaProjection, ag_llama
from ..tensor import AGTensor, ag_param
from .llm import FrozenProjection, model_arch


class LoraProjection(Module):
    """A projection `base` (a LlamaProjection or FrozenProjection, frozen) with a LoRA adapter."""

    def __init__(self, base: LlamaProjection, rank: int, alpha: float, a: np.ndarray | None = None,
                 b: np.ndarray | None = None):
        super().__init__()
        self.base = base
        n_in = base.Wt.shape[0] if isinstance(base, FrozenProjection) else base.W.shape[1]
        device = _weight(base).device_context.spec
        bound = 1.0 / math.sqrt(n_in)
        if a is None:
            a = grandom.generator().uniform(-bound, bound, size=(rank, n_in))
        self.lora_a = ag_param(a, device)
        self.lora_b = ag_param(np.zeros((base.out_features, rank)) if b is None else b, device)
        self.rank, self.alpha = int(rank), float(alpha)

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    @property
    def out_features(self) -> int:
        return self.base.out_features

    def forward(self, x: AGTensor) -> AGTensor:
        """base(x) + scale * lora_b %*% (lora_a %*% x)."""
        delta = ops.ag_matmul(self.lora_b, ops.ag_matmul(self.lora_a, x))
        return ops.ag_add(self.base(x), ops.ag_scale(delta, self.scale))

    def extra_repr(self) -> str:
        return f"rank={self.rank}, alpha={self.alpha}"


def _weight(proj) -> AGTensor:
    return proj.Wt if isinstance(proj, FrozenProjection) else proj.W


def _model(model, what: str) -> ag_llama | ag_gpt2:
    if not isinstance(model, (ag_llama, ag_gpt2)):
        raise GGMLError(f"{what}: expected an ag_llama or an ag_gpt2 (from llm_load, ag_llama or ag_gpt2), got "
                        f"{type(model).__name__}")
    return model


def _adapted(model: ag_llama | ag_gpt2) -> dict:
    """{llama.cpp's weight name: LoraProjection} of the model, in layer order."""
    names = PROJECTIONS[model_arch(model)]
    return {f"blk.{i}.{p}.weight": getattr(b, p) for i, b in enumerate(model.blocks) for p in names
            if isinstance(getattr(b, p), LoraProjection)}


def ag_lora(model: ag_llama | ag_gpt2, rank: int = 8, alpha: float | None = None,
            targets: str | Sequence[str] | None = None) -> ag_llama | ag_gpt2:
    """Add LoRA adapters of `rank` to the projections named in `targets` of every layer (llama.cpp's
    names; default all: an ag_llama's "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
    "ffn_up", "ffn_down", an ag_gpt2's "attn_qkv", "attn_output", "ffn_up", "ffn_down"), and freeze
    everything else (in place; returns the model). `alpha` (default: rank) scales the adapters'
    product by alpha / rank. model.parameters() is then the adapters alone."""
    _unadapted(model, "ag_lora")
    names = PROJECTIONS[model_arch(model)]
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
        raise GGMLError(f"ag_lora: rank must be a positive integer, got {rank!r}")
    alpha = float(rank) if alpha is None else alpha
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise GGMLError(f"ag_lora: alpha must be a positive number, got {alpha!r} (llama.cpp reads 0 as 'no scaling')")
    targets = names if targets is None else [targets] if isinstance(targets, str) else list(targets)
    unknown = [t for t in targets if t not in names]
    if not targets or unknown or len(set(targets)) != len(targets):
        raise GGMLError(f"ag_lora: targets must be distinct names among an {type(model).__name__}'s projections "
                        f"{', '.join(names)}; got {targets!r}")
    _freeze(model)
    for block in model.blocks:
        for name in targets:
            setattr(block, name, LoraProjection(getattr(block, name), int(rank), alpha))
    return model


def _unadapted(model: ag_llama | ag_gpt2, what: str) -> ag_llama | ag_gpt2:
    if _adapted(_model(model, what)):
        raise GGMLError(f"{what}: the model has LoRA adapters already: merge them (lora_merge) before adding others")
    return model


def _freeze(model: ag_llama | ag_gpt2) -> None:
    frozen = tuple(model.parameters())
    for p in frozen:
        p.requires_grad = False
    model._lora_frozen = frozen  # what lora_merge makes trainable again (a tuple: no parameter itself)


def lora_parameters(model: ag_llama | ag_gpt2) -> dict:
    """{tensor name: ag_param} of the model's adapters, named as llama.cpp's adapter file names
    them ("blk.0.attn_q.weight.lora_a", "blk.0.attn_q.weight.lora_b", ...)."""
    out = {}
    for name, proj in _adapted(_model(model, "lora_parameters")).items():
        out[name + ".lora_a"], out[name + ".lora_b"] = proj.lora_a, proj.lora_b
    return out


def lora_merge(model: ag_llama | ag_gpt2) -> ag_llama | ag_gpt2:
    """Add each adapter into its weight, W + (alpha / rank) * lora_b %*% lora_a, as an f32
    parameter (a weight held in a file's type is dequantized first), and end LoRA: the adapters go
    and what ag_lora froze is trainable again (in place; returns the model)."""
    adapted = _adapted(_model(model, "lora_merge"))
    if not adapted:
        raise GGMLError("lora_merge: the model has no LoRA adapters (ag_lora adds them)")
    for block in model.blocks:
        for p in PROJECTIONS[model_arch(model)]:
            proj = getattr(block, p)
            if not isinstance(proj, LoraProjection):
                continue
            base = proj.base
            w = _weight(base)
            W = w.numpy().T if isinstance(base, FrozenProjection) else w.numpy()  # [out, in]
            merged = W.astype(np.float64) + proj.scale * (proj.lora_b.data @ proj.lora_a.data)
            if isinstance(base, FrozenProjection):
                base.W = ag_param(merged, w.device_context.spec)
                del base.Wt
                base.__class__ = LlamaProjection
            else:
                base.W.data = merged
            setattr(block, p, base)
    for p in model.__dict__.pop("_lora_frozen", ()):
        p.requires_grad = True
    return model


def llm_save_lora(model: ag_llama | ag_gpt2, path: str | os.PathLike[str]) -> str:
    """Write the model's LoRA adapters as a llama.cpp LoRA adapter file, atomically; returns the
    path. llama.cpp applies it to the base model file (llama-cpp-python: Llama(base, lora_path=path))."""
    adapted = _adapted(_model(model, "llm_save_lora"))
    if not adapted:
        raise GGMLError("llm_save_lora: the model has no LoRA adapters (ag_lora adds them)")
    alphas = {proj.alpha for proj in adapted.values()}
    if len(alphas) != 1:
        raise GGMLError(f"llm_save_lora: the adapters have different alphas {sorted(alphas)}; a llama.cpp adapter "
                        "file has one")
    keys = {"general.type": "adapter", "adapter.type": "lora", "adapter.lora.alpha": alphas.pop()}
    tensors = []
    for name, proj in adapted.items():
        tensors.append((name + ".lora_a", proj.lora_a.numpy(), None))  # numpy (rank, in): ne [in, rank]
        tensors.append((name + ".lora_b", proj.lora_b.numpy(), None))  # numpy (out, rank): ne [rank, out]
    return write_llm_gguf(path, model_arch(model), keys, tensors, "llm_save_lora")


def _adapter_pairs(f: GGUFFile, model: ag_llama | ag_gpt2) -> dict:
    """{(layer, projection): (lora_a [rank, in], lora_b [out, rank])} of an adapter file, checked
    against the model as llama.cpp checks them."""
    names = {}
    for name in f.tensors:
        for end in (".lora_a", ".lora_b"):
            if name.endswith(end):
                names.setdefault(name[:-len(end)], {})[end] = name
                break
        else:
            if not name.endswith("_norm.weight"):  # norm adapters: llama.cpp skips them too
                raise GGMLError(f"{f.path}: tensor {name!r} is neither a .lora_a nor a .lora_b")
    pairs, projections = {}, PROJECTIONS[model_arch(model)]
    for base, ends in names.items():
        parts = base.split(".")
        if len(ends) != 2:
            raise GGMLError(f"{f.path}: {base!r} has only {next(iter(ends.values()))!r}; an adapter is a pair")
        if (len(parts) != 4 or parts[0] != "blk" or not parts[1].isdigit() or int(parts[1]) >= len(model.blocks)
                or parts[2] not in projections or parts[3] != "weight"):
            raise GGMLError(f"{f.path}: an adapter on {base!r}; ggmlpy adapts the projections blk.N.{{"
                            f"{', '.join(projections)}}}.weight of this model's {len(model.blocks)} layers")
        a, b = (f.data(ends[e]).astype(np.float64) for e in (".lora_a", ".lora_b"))  # numpy shape: ne reversed
        proj = getattr(model.blocks[int(parts[1])], parts[2])
        n_in = proj.Wt.shape[0] if isinstance(proj, FrozenProjection) else proj.W.shape[1]
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != n_in or b.shape[0] != proj.out_features \
                or a.shape[0] != b.shape[1]:
            raise GGMLError(f"{f.path}: {base!r}'s adapter has lora_a {list(a.shape)[::-1]}, lora_b "
                            f"{list(b.shape)[::-1]} (ne); the weight needs [{n_in}, r] and [r, {proj.out_features}]")
        pairs[int(parts[1]), parts[2]] = (a, b)
    if not pairs:
        raise GGMLError(f"{f.path}: the adapter file holds no adapter")
    return pairs


def llm_load_lora(model: ag_llama | ag_gpt2, path: str | os.PathLike[str]) -> ag_llama | ag_gpt2:
    """Apply a llama.cpp LoRA adapter file (llm_save_lora's, or one llama.cpp's conversion script
    wrote) to `model` as trainable adapters, the rest frozen, as ag_lora leaves it (in place;
    returns the model). Each adapter keeps its file's rank; its scale is adapter.lora.alpha / rank,
    or 1 where the file's alpha is 0 or absent, as llama.cpp reads it."""
    _unadapted(model, "llm_load_lora")
    path = checked_path(path, "llm_load_lora")
    with GGUFFile(path) as f:
        meta = f.metadata
        if meta.get("general.type") != "adapter" or meta.get("adapter.type") != "lora":
            raise GGMLError(f"{path}: not a LoRA adapter file (general.type {meta.get('general.type')!r}, "
                            f"adapter.type {meta.get('adapter.type')!r})")
        arch = model_arch(model)
        if meta.get("general.architecture") != arch:
            raise GGMLError(f"{path}: an adapter for architecture {meta.get('general.architecture')!r}, the model "
                            f"is {arch!r}")
        if DIGEST_KEY in meta and digest(f, every_key=True) != meta[DIGEST_KEY]:
            raise GGMLError(f"{path}: the adapter does not match the digest llm_save_lora wrote with it: the file "
                            "is damaged or was changed after it was saved")
        alpha = meta.get("adapter.lora.alpha", 0.0)
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha) or alpha < 0:
            raise GGMLError(f"{path}: adapter.lora.alpha = {alpha!r} is not a non-negative number")
        pairs = _adapter_pairs(f, model)
    _freeze(model)
    for (i, p), (a, b) in pairs.items():
        rank = a.shape[0]
        block = model.blocks[i]
        setattr(block, p, LoraProjection(getattr(block, p), rank, float(alpha) if alpha else float(rank), a, b))
    return model


__all__ = ["ag_lora", "llm_load_lora", "llm_save_lora", "lora_merge", "lora_parameters"]
