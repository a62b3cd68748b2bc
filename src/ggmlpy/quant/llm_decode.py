"""llama.cpp's inference graph for the models llm_load makes (ag_llama, ag_gpt2): `llm_logits(model,
token_ids)`, every position's logits of a sequence, and `llm_generate(model, prompt_ids, ...)`,
generation with a KV cache, both as llama.cpp computes them.

The ag_* forward (nn/llama.py, nn/gpt2.py) is the model one trains: it recomputes every position,
and its attention sums in another order than llama.cpp's. Inference keeps each layer's keys and
values instead, in a cache of persistent f32 tensors of n_cache cells, and builds llama.cpp's
inference graph over the model's own weights, node for node as llama.cpp builds it without flash
attention (llama-cpp-python's default; its flash-attention path would cast the cache to f16):
`ggml_set_rows` writes the new tokens' keys and values at their positions (the values transposed,
as llama.cpp keeps them on that path), the scores are `ggml_mul_mat` of the cached keys and the
queries, `ggml_soft_max_ext` with an additive mask (0 up to each token's position, -inf past it),
then `ggml_mul_mat` of the cached values and the weights. A graph attends over the first `span`
cells, the tokens it reaches rounded up to 256 as llama.cpp pads its attended span (n_kv), and
computes the logits of its last token (generation) or of every token (llm_logits, as llama.cpp's
logits_all). The graphs of a cache: a sequence's (per length, kind and span, built and kept), and
the one-token decode step, built and placed once per span and re-run for every token with new
inputs (token id, position, mask row, value cells). A sequence longer than llama.cpp's
micro-batch (UBATCH) is fed in graphs of that many tokens, as llama.cpp splits it. The same
graphs give the same sums in the same order: llm_logits equals llama.cpp's logits bit for bit on
the files tested (tests/test_llama_cpp.py).

Typed weights ggml's CPU backend repacks (q4_0, q4_K, iq4_nl, ... on AVX2: graph/repack.py) are
multiplied as repacked copies, as llama.cpp places its weights; the model keeps the originals for
everything else (its forward, gathers, gradients). A copy is made once per decoder: blocks written
into a frozen weight in place afterwards are not seen until the next decoder (a larger cache, or a
replaced weight tensor).

The cache holds n_cache = the tokens asked for, rounded up to a multiple of 256 (PAD); generating
past the model's context length is an error. A decoder is kept on the model while its weights'
storages stay the same and its cache is large enough, so the next call reuses its graphs (a
trained parameter is read where it lives: the graphs see its new values).
"""
from __future__ import annotations

import math
import threading
import weakref
from typing import TYPE_CHECKING

import numpy as np

from ..bindings import ffi
from ..core.checked import checked_lib
from ..errors import GGMLError
from ..graph import CompiledGraph, PlacedGraph
from ..graph.repack import RepackedWeights
from ..nn.gpt2 import ag_gpt2
from ..nn.llama import LlamaProjection, ag_llama
from .llm import FrozenProjection, checked_token_ids, model_arch
from .lora import LoraProjection

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

F32, I32, I64 = checked_lib.GGML_TYPE_F32, checked_lib.GGML_TYPE_I32, checked_lib.GGML_TYPE_I64
PAD = 256  # the cache's granularity (llama.cpp pads the attended span of its cache to 256 cells)
UBATCH = 512  # llama.cpp's default n_ubatch: the most tokens one of its graphs computes
_MAX_PROMPT_GRAPHS = 4  # prompt graphs kept per decoder, the most recent lengths


class _Weights:
    """The ggml tensors of the model's weights, and the storages that hold them (kept alive, and
    compared with the model's to see whether a decoder still describes it)."""

    def __init__(self):
        self.storages: list = []

    def __call__(self, t):
        self.storages.append(t.storage)
        return t.storage.ptr


def _weight_storages(model) -> list:
    return [t.storage for _, t in model.named_parameters()] + [t.storage for _, t in model.named_buffers()]


def padded(n: int) -> int:
    """n rounded up to a multiple of PAD."""
    return -(-n // PAD) * PAD


class LlmDecoder:
    """A model's KV cache of `n_cache` positions (a multiple of PAD) and the graphs that fill and
    read it. `builds` counts the graphs built (the decode step's once per span, each prompt
    length's once)."""

    def __init__(self, model, n_cache: int):
        self.model_ref, self.n_cache = weakref.ref(model), padded(int(n_cache))
        self.arch = model_arch(model)
        self.dc = model.token_embd.weight.device_context
        self.lock = threading.Lock()
        self.builds = 0
        blocks = model.blocks
        kv = blocks[0].head_dim * blocks[0].n_kv_heads
        alloc = self.dc.persistent.alloc
        self.cache = [(alloc(F32, (kv, self.n_cache)), alloc(F32, (kv, self.n_cache))) for _ in blocks]
        for kc, vc in self.cache:  # zeros, as llama.cpp clears its cache: a cell past the tokens weighs 0 * value
            for c in (kc, vc):
                checked_lib.ggml_backend_tensor_memset(c.ptr, 0, 0, checked_lib.ggml_nbytes(c.ptr))
        self.prompts: dict = {}
        self.steps: dict = {}  # span -> the decode step's graph
        self.weights = _Weights()
        self.repacked = RepackedWeights(self.dc.backend)  # products only: the gathers read the originals
        self.kv = kv
        self.storage_ids = [id(s) for s in _weight_storages(model)]

    def describes(self, model, n_cache: int) -> bool:
        """Whether this decoder's graphs still read `model`'s weights (same storages, same layers)
        and its cache holds at least n_cache cells."""
        return n_cache <= self.n_cache and [id(s) for s in _weight_storages(model)] == self.storage_ids

    # -- the graph --------------------------------------------------------------------------------
    def _build(self, n: int, every: bool, span: int):
        """The graph for n tokens at consecutive positions, attending over the first `span` cells:
        inputs ids, pos [n] (i32), mask [span, n] (f32) and the cells of their values in the
        transposed value cache, vcells [kv * n] (i64: kv * n_cache may pass 2^31); output the last
        token's logits [vocab], or with `every` each token's [vocab, n]."""
        self.builds += 1
        m = self.model_ref()
        if m is None:
            raise GGMLError("llm_logits, llm_generate: the model this decoder was made for is gone")
        size = 192 * (len(m.blocks) + 2)  # tensor headers: some 60 a layer, 8 more per LoRA adapter
        graph = _Graph(size, size + 512)
        gc = graph.gctx
        ctx = gc.ctx
        graph.ids, graph.pos = gc.new_tensor(I32, [n]), gc.new_tensor(I32, [n])
        graph.mask, graph.vcells = gc.new_tensor(F32, [span, n]), gc.new_tensor(I64, [self.kv * n])
        for t in (graph.ids, graph.pos, graph.mask, graph.vcells):
            checked_lib.ggml_set_input(t)
        w = self.weights
        x = checked_lib.ggml_get_rows(ctx, w(m.token_embd.weight), graph.ids)
        if self.arch == "gpt2":
            pos_embd = _f32(ctx, w(m.position_embd.weight))
            x = checked_lib.ggml_add(ctx, x, checked_lib.ggml_get_rows(ctx, pos_embd, graph.pos))
        for block, (kc, vc) in zip(m.blocks, self.cache):
            layer = self._gpt2_block if self.arch == "gpt2" else self._llama_block
            x = layer(ctx, block, x, graph, kc.ptr, vc.ptr)
        if not every:
            x = checked_lib.ggml_view_2d(ctx, x, x.ne[0], 1, x.nb[1], (n - 1) * x.nb[1])
        h = self._norm(ctx, m.output_norm, x)
        logits = self._project(ctx, m.output, h) if m.output is not None else \
            checked_lib.ggml_mul_mat(ctx, self.repacked.get(w(m.token_embd.weight)), h)
        checked_lib.ggml_set_output(logits)
        checked_lib.ggml_build_forward_expand(gc.graph, logits)
        graph.logits = logits
        graph.place(self.dc.backend)
        return graph

    def _norm(self, ctx, norm, x):
        """RMSNorm (llama) or LayerNorm with bias (gpt2) of x's columns, times the weight."""
        if hasattr(norm, "gamma"):
            y = checked_lib.ggml_norm(ctx, x, norm.eps)
            y = checked_lib.ggml_mul(ctx, y, _f32(ctx, self.weights(norm.gamma)))
            return checked_lib.ggml_add(ctx, y, _f32(ctx, self.weights(norm.beta)))
        y = checked_lib.ggml_rms_norm(ctx, x, norm.eps)
        return checked_lib.ggml_mul(ctx, y, _f32(ctx, self.weights(norm.weight)))

    def _matmul(self, ctx, w, x):
        """w %*% x for a parameter w [out, in]: ggml_mul_mat over a transposed copy made in the graph
        (so it reads the values trained last), laid out as a file stores the matrix."""
        t = checked_lib.ggml_cont(ctx, checked_lib.ggml_transpose(ctx, self.weights(w)))
        return checked_lib.ggml_mul_mat(ctx, t, x)

    def _project(self, ctx, proj, x):
        """W %*% x (+ b): ggml_mul_mat over the stored t(W) of a file's typed weight, or over a
        parameter W; with a LoRA adapter, + scale * lora_b %*% (lora_a %*% x) added to the product
        before the bias, as llama.cpp's build_lora_mm adds it and its graphs add a bias after."""
        lora = proj if type(proj) is LoraProjection else None
        base = proj.base if lora is not None else proj
        if type(base) is FrozenProjection:
            y = checked_lib.ggml_mul_mat(ctx, self.repacked.get(self.weights(base.Wt)), x)
        elif type(base) is LlamaProjection:
            y = self._matmul(ctx, base.W, x)
        else:
            raise GGMLError(f"llm_logits, llm_generate: no inference graph for a projection of type "
                            f"{type(base).__name__} (LlamaProjection, the frozen projections of llm_load and LoRA "
                            f"adapters on them are supported)")
        if lora is not None:
            ab = self._matmul(ctx, lora.lora_b, self._matmul(ctx, lora.lora_a, x))
            y = checked_lib.ggml_add(ctx, y, checked_lib.ggml_scale(ctx, ab, lora.scale))
        return y if base.b is None else checked_lib.ggml_add(ctx, y, _f32(ctx, self.weights(base.b)))

    def _attend(self, ctx, block, q, k, v, inp, kc, vc):
        """Write k, v [kv, n] into the cache at the tokens' positions, then attend with q [d, n]
        (as [head_dim, n_heads, n], rotated or not) over the cache: [d, n]. As llama.cpp's
        attention without flash attention (llama-cpp-python's default): the scores
        ggml_mul_mat(k, q), ggml_soft_max_ext with the mask, then ggml_mul_mat over the value
        cache, which is kept transposed (value e of the token at p in cell e * n_cache + p) so
        that the product runs along contiguous rows."""
        hd, nh, nkv, n, span = block.head_dim, block.n_heads, block.n_kv_heads, int(q.ne[2]), int(inp.mask.ne[0])
        kc = checked_lib.ggml_set_rows(ctx, kc, k, inp.pos)
        v = v if checked_lib.ggml_is_contiguous(v) else checked_lib.ggml_cont(ctx, v)
        vc = checked_lib.ggml_set_rows(ctx, checked_lib.ggml_reshape_2d(ctx, vc, 1, self.kv * self.n_cache),
                                       checked_lib.ggml_reshape_2d(ctx, v, 1, self.kv * n), inp.vcells)
        row = self.n_cache * 4  # a value cache row: one dimension's values at every cell
        keys = checked_lib.ggml_view_3d(ctx, kc, hd, span, nkv, kc.nb[1], hd * 4, 0)  # [head_dim, span, n_kv_heads]
        values = checked_lib.ggml_view_3d(ctx, vc, span, hd, nkv, row, row * hd, 0)  # [span, head_dim, n_kv_heads]
        qh = checked_lib.ggml_permute(ctx, q, 0, 2, 1, 3)  # [head_dim, n, n_heads]
        kq = checked_lib.ggml_mul_mat(ctx, keys, qh)  # [span, n, n_heads]
        kq = checked_lib.ggml_soft_max_ext(ctx, kq, inp.mask, 1.0 / math.sqrt(hd), 0.0)
        out = checked_lib.ggml_permute(ctx, checked_lib.ggml_mul_mat(ctx, values, kq), 0, 2, 1, 3)
        return checked_lib.ggml_cont_2d(ctx, out, hd * nh, n)  # out: [head_dim, n_heads, n]

    def _rope(self, ctx, block, y, n_heads, pos):
        y = checked_lib.ggml_reshape_3d(ctx, y, block.head_dim, n_heads, y.ne[1])
        return checked_lib.ggml_rope_ext(ctx, y, pos, ffi.NULL, block.head_dim, block.rope_mode, 0, block.rope_base,
                                         1.0, 0.0, 1.0, 32.0, 1.0)

    def _llama_block(self, ctx, block, x, inp, kc, vc):
        n = x.ne[1]
        h = self._norm(ctx, block.attn_norm, x)
        q = self._rope(ctx, block, self._project(ctx, block.attn_q, h), block.n_heads, inp.pos)
        k = self._rope(ctx, block, self._project(ctx, block.attn_k, h), block.n_kv_heads, inp.pos)
        k = checked_lib.ggml_reshape_2d(ctx, k, block.head_dim * block.n_kv_heads, n)
        a = self._attend(ctx, block, q, k, self._project(ctx, block.attn_v, h), inp, kc, vc)
        x = checked_lib.ggml_add(ctx, x, self._project(ctx, block.attn_output, a))
        h = self._norm(ctx, block.ffn_norm, x)
        gate = checked_lib.ggml_silu(ctx, self._project(ctx, block.ffn_gate, h))
        f = self._project(ctx, block.ffn_down, checked_lib.ggml_mul(ctx, gate, self._project(ctx, block.ffn_up, h)))
        return checked_lib.ggml_add(ctx, x, f)

    def _gpt2_block(self, ctx, block, x, inp, kc, vc):
        n = x.ne[1]
        d, kv = block.d_model, block.head_dim * block.n_kv_heads
        qkv = self._project(ctx, block.attn_qkv, self._norm(ctx, block.attn_norm, x))
        q = checked_lib.ggml_view_3d(ctx, qkv, block.head_dim, block.n_heads, n, block.head_dim * 4, qkv.nb[1], 0)
        k = checked_lib.ggml_view_2d(ctx, qkv, kv, n, qkv.nb[1], d * 4)
        v = checked_lib.ggml_view_2d(ctx, qkv, kv, n, qkv.nb[1], (d + kv) * 4)
        a = self._attend(ctx, block, q, k, v, inp, kc, vc)
        x = checked_lib.ggml_add(ctx, x, self._project(ctx, block.attn_output, a))
        h = self._norm(ctx, block.ffn_norm, x)
        f = self._project(ctx, block.ffn_down, checked_lib.ggml_gelu(ctx, self._project(ctx, block.ffn_up, h)))
        return checked_lib.ggml_add(ctx, x, f)

    # -- running ----------------------------------------------------------------------------------
    def run(self, tokens: np.ndarray, start: int, every: bool = False) -> np.ndarray:
        """Feed `tokens` at positions start.. (the cache before `start` holds the earlier ones):
        the last token's logits, float32 [vocab], or with `every` each token's [n, vocab]. One
        token runs the decode step's graph."""
        n = len(tokens)
        span = padded(start + n)
        if span > self.n_cache:
            raise GGMLError(f"{n} tokens at position {start} pass the cache of {self.n_cache} cells")
        if n == 1:
            graph = self.steps.get(span)
            if graph is None:
                graph = self.steps[span] = self._build(1, False, span)
        else:
            graph = self.prompts.get((n, every, span))
            if graph is None:
                if len(self.prompts) >= _MAX_PROMPT_GRAPHS:
                    self.prompts.pop(next(iter(self.prompts))).free()
                graph = self.prompts[n, every, span] = self._build(n, every, span)
        pos = np.arange(start, start + n, dtype=np.int32)
        mask = np.where(np.arange(span)[None, :] <= pos[:, None], 0.0, -np.inf).astype(np.float32)
        vcells = (np.arange(self.kv, dtype=np.int64)[None, :] * self.n_cache + pos[:, None]).ravel()
        with self.dc.lock:
            self.dc.check_usable()
            CompiledGraph.write(graph.ids, np.ascontiguousarray(tokens, dtype=np.int32))
            CompiledGraph.write(graph.pos, pos)
            CompiledGraph.write(graph.mask, mask)
            CompiledGraph.write(graph.vcells, vcells)
            graph.run.compute()
            shape = (n, int(graph.logits.ne[0])) if every else (int(graph.logits.ne[0]),)
            return CompiledGraph.read(graph.logits, shape)

class _Graph(PlacedGraph):
    """One built graph, placed, with its inputs (token ids, positions, mask, value cells) and output
    (logits)."""

    __slots__ = ("ids", "pos", "mask", "vcells", "logits")


def _f32(ctx, t):
    return t if t.type == F32 else checked_lib.ggml_cast(ctx, t, F32)


# -- sampling ---------------------------------------------------------------------------------------
def _sample(logits: np.ndarray, greedy: bool, temperature: float, top_k: int, top_p: float, rng) -> int:
    """The next token: the first largest logit when greedy (llama.cpp's greedy sampler), else a
    draw from softmax(logits / temperature) restricted to the top_k largest (0: all) and then to
    the smallest set of those whose probability reaches top_p."""
    if greedy:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    order = np.argsort(-z, kind="stable")
    if top_k:
        order = order[:top_k]
    p = np.exp(z[order] - z[order[0]])
    p /= p.sum()
    if top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(p), top_p)) + 1
        order, p = order[:keep], p[:keep] / p[:keep].sum()
    return int(order[rng.choice(len(order), p=p)])


def _number(what: str, v, lo: float, hi: float, lo_open: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v) \
            or v < lo or v > hi or (lo_open and v == lo):
        raise GGMLError(f"llm_generate: {what} must be a number in {'(' if lo_open else '['}{lo}, {hi}], got {v!r}")
    return float(v)


_DECODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its LlmDecoder
_DECODERS_LOCK = threading.Lock()


def decoder_of(model) -> LlmDecoder | None:
    """The decoder kept for `model` (its last llm_generate's), or None."""
    with _DECODERS_LOCK:
        return _DECODERS.get(model)


def decoder_for(model, n_cache: int) -> LlmDecoder:
    """A decoder of at least n_cache positions (a multiple of PAD) for the model: the one kept for
    the model while it still describes it, else a new one (kept in its place; it goes with the
    model)."""
    with _DECODERS_LOCK:
        dec = _DECODERS.get(model)
        if dec is None or not dec.describes(model, n_cache):
            # the old one is freed with its last reference: a call still running holds one
            dec = _DECODERS[model] = LlmDecoder(model, n_cache)
        return dec


def llm_logits(model: ag_llama | ag_gpt2, token_ids: ArrayLike) -> np.ndarray:
    """The logits of every position of one sequence of token ids, as numpy [n_tokens, n_vocab]
    (row i: the prediction after token i, as llama.cpp's llama_get_logits lays them out), computed
    by llama.cpp's inference graph (see the module's notes), in graphs of at most UBATCH tokens as
    llama.cpp's micro-batches. An ag_gpt2 takes at most its context length of tokens."""
    ids = checked_token_ids(model, token_ids, "llm_logits")
    n = len(ids)
    if isinstance(model, ag_gpt2) and n > model.context:
        raise GGMLError(f"llm_logits: {n} tokens exceed the context of {model.context} learned positions")
    dec = decoder_for(model, padded(n))
    with dec.lock:
        return np.concatenate([dec.run(ids[i:i + UBATCH], i, every=True) for i in range(0, n, UBATCH)])


def llm_generate(model: ag_llama | ag_gpt2, prompt_ids: ArrayLike, max_new_tokens: int = 32, greedy: bool = True,
                 temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                 stop_ids: ArrayLike = ()) -> np.ndarray:
    """Continue the token ids `prompt_ids` by up to `max_new_tokens` tokens with a model from
    llm_load (or an ag_llama / ag_gpt2 built in ggmlpy); returns the new ids (int32, without the
    prompt), ending early after a token in `stop_ids`. The prompt is processed in one graph, then
    each token by the decode step compiled once (see the module's notes). `greedy`: the most
    likely token each time (llama.cpp's greedy sampler's choice); otherwise drawn at
    `temperature` from the `top_k` most likely (0: all) within probability `top_p`, reproducibly
    for a given `seed`. The prompt plus max_new_tokens may not exceed the model's context length."""
    ids = checked_token_ids(model, prompt_ids, "llm_generate")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 0:
        raise GGMLError(f"llm_generate: max_new_tokens must be a whole number >= 0, got {max_new_tokens!r}")
    if not greedy:
        temperature = _number("temperature", temperature, 0.0, math.inf, True)
        top_p = _number("top_p", top_p, 0.0, 1.0, True)
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 0:
        raise GGMLError(f"llm_generate: top_k must be a whole number >= 0 (0: no limit), got {top_k!r}")
    try:
        stops = {int(t) for t in np.asarray(stop_ids, dtype=np.int64).ravel()}
    except (TypeError, ValueError, OverflowError):
        raise GGMLError(f"llm_generate: stop_ids must be token ids (integers), got {stop_ids!r}") from None
    total = len(ids) + int(max_new_tokens)
    if total > model.context:
        raise GGMLError(f"llm_generate: {len(ids)} prompt tokens and {int(max_new_tokens)} new ones exceed the "
                        f"model's context length of {model.context} positions")
    if max_new_tokens == 0:
        return np.zeros(0, dtype=np.int32)
    rng = np.random.default_rng(seed)
    dec = decoder_for(model, padded(total))
    out: list = []
    with dec.lock:
        logits = dec.run(ids, 0)
        while True:
            token = _sample(logits, greedy, temperature, int(top_k), top_p, rng)
            out.append(token)
            if len(out) == max_new_tokens or token in stops:
                break
            logits = dec.run(np.array([token]), len(ids) + len(out) - 1)
    return np.array(out, dtype=np.int32)


__all__ = ["llm_generate", "llm_logits"]
