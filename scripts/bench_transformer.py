"""A character-level GPT trained one step at a time: ggmlpy (compiled and eager) against PyTorch CPU.

The model (vocabulary 95, d_model 128, 4 heads, context 64, pre-LayerNorm blocks
with a 4x GELU MLP, tied output head; AdamW, gradient clipping 1.0, batch 32) is
ggmlpy's `ag_gpt`, built from the library's layers, and the same model in
PyTorch from the same initial weights and batches (text of a few standard-library
modules). First the numbers: gradients of one step and a short loss curve must
agree with PyTorch's. Then the speed, in interleaved rounds (median ms/step) at
each depth, with `ag_checkpoint` per block, and with one competing busy process.

    python scripts/bench_transformer.py [--layers 2 4 8] [--repeats 5] [--quick]

Ends with `summary: compiled R1x PyTorch, eager R2x PyTorch, contended compiled R3x PyTorch`.
"""
from __future__ import annotations

import argparse
import inspect
import sys

import numpy as np

import ggmlpy as g
from benchlib import Busy, interleaved, loadavg
from benchmodels import kernels_isa, torch_or_none

VOCAB, D, HEADS, CONTEXT, BATCH = 95, 128, 4, 64, 32
LR, WD, CLIP = 3e-4, 0.01, 1.0


def corpus() -> np.ndarray:
    """Printable ASCII of a few standard-library modules, as indices 0..94."""
    import collections
    import json
    import textwrap
    text = "".join(inspect.getsource(m) for m in (json, textwrap, collections))
    codes = np.frombuffer(text.encode("ascii", "replace"), np.uint8).astype(np.int64)
    codes = np.where(codes == 10, 32, codes)  # newline as space: 95 printable characters
    return np.clip(codes - 32, 0, VOCAB - 1)


def batches(data: np.ndarray, n: int, seed: int = 0):
    """n batches (x, y) of [T, B] indices: y is x shifted by one token."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        start = rng.integers(0, data.size - CONTEXT - 1, BATCH)
        x = np.stack([data[s:s + CONTEXT] for s in start], 1)
        y = np.stack([data[s + 1:s + CONTEXT + 1] for s in start], 1)
        out.append((x, y))
    return out


def ggml_model(layers: int, seed: int = 0, checkpoint: bool = False):
    g.manual_seed(seed)
    model = g.ag_gpt(VOCAB, D, HEADS, layers, CONTEXT)
    if checkpoint:
        for blk in model.blocks:
            fwd = blk.forward
            blk.forward = lambda x, fwd=fwd: g.ag_checkpoint(fwd, x)
    return model


def torch_model(torch, model):
    """The same GPT in PyTorch ([B, T] token batches), weights copied from the ggmlpy model.
    `.pairs` lists (ggmlpy parameter, PyTorch parameter, transposed?) for comparing gradients."""
    nn, fn = torch.nn, torch.nn.functional
    pairs = []

    def param(src, transposed=False):
        a = np.asarray(src.numpy(), np.float32)
        a = a.T.copy() if transposed else (a[:, 0].copy() if a.shape[1] == 1 else a)
        p = nn.Parameter(torch.tensor(a))
        pairs.append((src, p, transposed))
        return p

    def linear(w, b):
        lin = nn.Linear(w.shape[1], w.shape[0])
        lin.weight, lin.bias = param(w), param(b)
        return lin

    def layer_norm(ln):
        m = nn.LayerNorm(D)
        m.weight, m.bias = param(ln.gamma), param(ln.beta)
        return m

    class Block(nn.Module):
        def __init__(self, blk):
            super().__init__()
            a = blk.attn
            self.ln1 = layer_norm(blk.ln1)
            self.q, self.k, self.v = linear(a.W_q, a.b_q), linear(a.W_k, a.b_k), linear(a.W_v, a.b_v)
            self.o = linear(a.W_o, a.b_o)
            self.ln2 = layer_norm(blk.ln2)
            self.fc, self.proj = linear(blk.fc.W, blk.fc.b), linear(blk.proj.W, blk.proj.b)

        def forward(self, x):
            bsz, tt, _ = x.shape
            h = self.ln1(x)
            q, k, v = (f(h).view(bsz, tt, HEADS, D // HEADS).transpose(1, 2) for f in (self.q, self.k, self.v))
            a = fn.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(bsz, tt, D))
            return x + self.proj(fn.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = param(model.tok.weight, True), param(model.pos, True)
            self.blocks = nn.ModuleList(Block(b) for b in model.blocks)
            self.ln_f = layer_norm(model.ln_f)

        def forward(self, idx, targets):
            x = self.tok[idx] + self.pos[: idx.shape[1]]
            for b in self.blocks:
                x = b(x)
            logits = self.ln_f(x) @ self.tok.T
            return fn.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))

    gpt = GPT()
    gpt.pairs = pairs
    return gpt


# -- the three training steps ----------------------------------------------------------------------------------
def ggml_compiled(model, data):
    opt = g.optimizer_adamw(model.parameters(), lr=LR, weight_decay=WD)
    x0, y0 = (g.ag_tensor(a, dtype="i32") for a in data[0])
    step = g.ag_compile(lambda x, y: model.loss(x, y), [x0, y0], optimizer=opt, clip_grad=CLIP)
    ins = [tuple(g.ag_tensor(a, dtype="i32") for a in b) for b in data]
    it = iter(range(10 ** 9))
    return lambda: step(*ins[next(it) % len(ins)])


def ggml_eager(model, data):
    opt = g.optimizer_adamw(model.parameters(), lr=LR, weight_decay=WD)
    ins = [tuple(g.ag_tensor(a, dtype="i32") for a in b) for b in data]
    it = iter(range(10 ** 9))

    def step():
        x, y = ins[next(it) % len(ins)]
        with g.with_grad_tape():
            loss = model.loss(x, y)
        grads = g.backward(loss)
        g.clip_grad_norm(opt.params, grads, CLIP)
        opt.step(grads)
        opt.zero_grad()
        return loss.item()
    return step


def torch_step(torch, tmodel, data):
    opt = torch.optim.AdamW(tmodel.parameters(), lr=LR, weight_decay=WD)
    ins = [tuple(torch.tensor(a.T.copy()) for a in b) for b in data]
    it = iter(range(10 ** 9))

    def step():
        x, y = ins[next(it) % len(ins)]
        opt.zero_grad()
        loss = tmodel(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(tmodel.parameters(), CLIP)
        opt.step()
        return loss.item()
    return step


# -- checks -----------------------------------------------------------------------------------------------------
def check_numbers(torch, data, steps: int) -> dict:
    """Relative gradient error of one step, and the largest relative loss difference over a curve."""
    model = ggml_model(2)
    tmodel = torch_model(torch, model)
    x, y = data[0]
    with g.with_grad_tape():
        loss = model.loss(g.ag_tensor(x, dtype="i32"), g.ag_tensor(y, dtype="i32"))
    grads = g.backward(loss)
    tl = tmodel(torch.tensor(x.T.copy()), torch.tensor(y.T.copy()))
    tl.backward()
    ours, ref = [], []
    for mine, theirs, transposed in tmodel.pairs:
        ours.append(np.asarray(grads[mine].numpy(), np.float64).ravel())
        t = theirs.grad.numpy().astype(np.float64)
        ref.append((t.T if transposed else t.reshape(np.asarray(grads[mine].numpy()).shape)).ravel())
    ours, ref = np.concatenate(ours), np.concatenate(ref)
    grad_rel = float(np.linalg.norm(ours - ref) / np.linalg.norm(ref))
    curves = {}
    for label, make in (("compiled", ggml_compiled), ("eager", ggml_eager)):
        m = ggml_model(2)
        t = torch_step(torch, torch_model(torch, m), data)
        s = make(m, data)
        a, b = np.array([s() for _ in range(steps)]), np.array([t() for _ in range(steps)])
        curves[label] = float(np.max(np.abs(a - b) / np.abs(b)))
    return {"loss0": (loss.item(), tl.item()), "grad_rel": grad_rel, "curve_rel": curves}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--number", type=int, default=3)
    ap.add_argument("--curve", type=int, default=30, help="steps of the loss curves compared with PyTorch")
    ap.add_argument("--quick", action="store_true", help="2 blocks only, fewer rounds")
    args = ap.parse_args()
    if args.quick:
        args.layers, args.repeats, args.number, args.curve = [2], 3, 2, 10
    torch = torch_or_none()
    if torch is None:
        sys.exit("bench_transformer: needs PyTorch (pip install torch==2.13.0)")
    threads = g.get_backend("cpu").n_threads
    print(f"threads {threads}; load {loadavg()}")
    print(kernels_isa())
    data = batches(corpus(), 8)

    num = check_numbers(torch, data, args.curve)
    print(f"numbers: loss {num['loss0'][0]:.6f} vs PyTorch {num['loss0'][1]:.6f}; gradients rel. error "
          f"{num['grad_rel']:.2e}; loss curves ({args.curve} steps) max rel. difference: "
          + ", ".join(f"{k} {v:.1e}" for k, v in num["curve_rel"].items()))

    first = {}
    print(f"{'blocks':>6} {'variant':<12} {'compiled':>9} {'eager':>9} {'PyTorch':>9} {'comp/PT':>8} {'eager/PT':>9}")
    for layers in args.layers:
        for ckpt in (False, True):
            tm = torch_model(torch, ggml_model(layers))
            fns = {"compiled": (ggml_compiled(ggml_model(layers, checkpoint=ckpt), data), args.number),
                   "eager": (ggml_eager(ggml_model(layers, checkpoint=ckpt), data), args.number),
                   "torch": (torch_step(torch, tm, data), args.number)}
            t = interleaved(fns, repeats=args.repeats)
            rc, re = t["compiled"] / t["torch"], t["eager"] / t["torch"]
            label = "checkpoint" if ckpt else "plain"
            print(f"{layers:>6} {label:<12} {t['compiled'] * 1e3:>8.1f}  {t['eager'] * 1e3:>8.1f}  "
                  f"{t['torch'] * 1e3:>8.1f}  {rc:>7.2f}x {re:>8.2f}x", flush=True)
            if not first:
                first = {"compiled": rc, "eager": re}
        if args.quick:
            break

    # one competing busy process: both sides measured under it, interleaved
    layers = args.layers[0]
    with Busy():
        tm = torch_model(torch, ggml_model(layers))
        t = interleaved({"compiled": (ggml_compiled(ggml_model(layers), data), args.number),
                         "torch": (torch_step(torch, tm, data), args.number)}, repeats=args.repeats)
    contended = t["compiled"] / t["torch"]
    print(f"contended ({layers} blocks, one busy process): compiled {t['compiled'] * 1e3:.1f} ms, "
          f"PyTorch {t['torch'] * 1e3:.1f} ms; load {loadavg()}")
    print(f"summary: compiled {first['compiled']:.2f}x PyTorch, eager {first['eager']:.2f}x PyTorch, "
          f"contended compiled {contended:.2f}x PyTorch")


if __name__ == "__main__":
    main()
