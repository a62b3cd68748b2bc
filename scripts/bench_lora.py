"""A LoRA fine-tuning step of a llama model against a full f32 step of the same model, and the
memory each holds.

The model (random weights, architecture `llama`: d_model 512, 8 heads, 4 key/value heads, 4 layers,
d_ff 1536, vocabulary 4096; 16.8M parameters) is written with llm_save in f32, q8_0 and q4_K and
loaded back with llm_load. Each step is ag_compile's (forward, backward and AdamW in one graph) on a
batch of 8 x 128 tokens: the full step trains every f32 weight; the LoRA steps train rank-8 adapters
on all seven projections of each layer (ag_lora), the base frozen in its file's type. Timed in
interleaved rounds (median ms/step); memory is what the model holds plus the step's compute buffer.
Where PyTorch is installed, its full f32 step of a model of the same shapes (RMSNorm, rotary
embedding, grouped-query causal attention, SwiGLU; AdamW) is timed in the same rounds, on as many
threads: a timing of the same work, not a check of the same numbers (tests/test_llm_save.py and
tests/test_lora.py check those against llama.cpp).

    python scripts/bench_lora.py [--repeats 5] [--quick]

Ends with `summary: LoRA step q8_0 X.XXx, q4_K X.XXx, f32 base X.XXx the full f32 step; q8_0 X.XXx
PyTorch's full f32 step` (the last part where PyTorch is installed).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

import ggmlpy as g
from benchlib import interleaved, loadavg, machine, row
from benchmodels import kernels_isa, torch_or_none

FULL = dict(vocab=4096, d_model=512, n_heads=8, n_kv_heads=4, n_layers=4, d_ff=1536, batch=8, tokens=128)
QUICK = dict(vocab=1024, d_model=256, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=512, batch=4, tokens=64)


def held_bytes(model) -> int:
    """The bytes of every tensor the model holds, in any of its layers."""
    seen = {}

    def walk(m):
        for value in m.__dict__.values():
            if isinstance(value, g.AGTensor):
                seen[id(value)] = value.storage.nbytes
        for child in m.children():
            walk(child)
    walk(model)
    return sum(seen.values())


def compiled_step(model, batch: tuple):
    xb, yb = batch
    step = g.ag_compile(lambda x, y: model.loss(x, y), [xb, yb],
                        optimizer=g.optimizer_adamw(model.parameters(), lr=1e-4))
    step(xb, yb)
    return lambda: step(xb, yb), step


def torch_step(torch, c: dict, seq: np.ndarray):
    """PyTorch's full f32 training step (forward, backward, AdamW) of a llama of config `c`."""
    nn, F = torch.nn, torch.nn.functional
    d, heads, kv, hd = c["d_model"], c["n_heads"], c["n_kv_heads"], c["d_model"] // c["n_heads"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm, self.ffn_norm = nn.RMSNorm(d, eps=1e-5), nn.RMSNorm(d, eps=1e-5)
            self.q, self.k = nn.Linear(d, d, bias=False), nn.Linear(d, kv * hd, bias=False)
            self.v, self.o = nn.Linear(d, kv * hd, bias=False), nn.Linear(d, d, bias=False)
            self.gate, self.up = nn.Linear(d, c["d_ff"], bias=False), nn.Linear(d, c["d_ff"], bias=False)
            self.down = nn.Linear(c["d_ff"], d, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            h = self.attn_norm(x)
            q = self.q(h).view(b, t, heads, hd).transpose(1, 2)
            k = self.k(h).view(b, t, kv, hd).transpose(1, 2)
            v = self.v(h).view(b, t, kv, hd).transpose(1, 2)
            q, k = (torch.cat([z[..., 0::2] * cos - z[..., 1::2] * sin, z[..., 0::2] * sin + z[..., 1::2] * cos], -1)
                    for z in (q, k))
            k, v = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + self.o(a)
            h = self.ffn_norm(x)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embd = nn.Embedding(c["vocab"], d)
            self.blocks = nn.ModuleList(Block() for _ in range(c["n_layers"]))
            self.norm, self.out = nn.RMSNorm(d, eps=1e-5), nn.Linear(d, c["vocab"], bias=False)

        def forward(self, idx):
            t = idx.shape[1]
            freqs = 10000.0 ** (-torch.arange(0, hd, 2) / hd)
            angles = torch.arange(t)[:, None] * freqs[None]
            cos, sin = angles.cos(), angles.sin()
            x = self.embd(idx)
            for blk in self.blocks:
                x = blk(x, cos, sin)
            return self.out(self.norm(x))

    torch.manual_seed(0)
    model = Llama()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x, y = (torch.from_numpy(np.ascontiguousarray(a.T)) for a in (seq[:-1], seq[1:]))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, c["vocab"]), y.reshape(-1))
        loss.backward()
        opt.step()
    return step


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="a smaller model and batch (a smoke run)")
    args = p.parse_args(argv)
    c = QUICK if args.quick else FULL
    print(f"{machine()}; {kernels_isa()}; threads {g.get_num_threads()}")
    g.manual_seed(0)
    model = g.ag_llama(c["vocab"], d_model=c["d_model"], n_heads=c["n_heads"], n_kv_heads=c["n_kv_heads"],
                       n_layers=c["n_layers"], d_ff=c["d_ff"], context=c["tokens"])
    print(f"model: {model.num_parameters() / 1e6:.1f}M parameters; batch {c['batch']} x {c['tokens']} tokens")
    rng = np.random.default_rng(0)
    seq = rng.integers(0, c["vocab"], size=(c["tokens"] + 1, c["batch"]))
    batch = (g.ag_tensor(seq[:-1], dtype="i32"), g.ag_tensor(seq[1:], dtype="i32"))
    steps, memory = {}, {}
    with tempfile.TemporaryDirectory() as folder:
        files = {t: g.llm_save(model, os.path.join(folder, f"{t}.gguf"), vocab=[f"t{i}" for i in range(c["vocab"])],
                               dtype=t) for t in ("f32", "q8_0", "q4_K")}
        full = g.llm_load(files["f32"])
        steps["full f32 step"], s = compiled_step(full, batch)
        memory["full f32 step"] = (held_bytes(full), s.buffer_bytes)
        for t in ("q8_0", "q4_K", "f32"):
            lora = g.ag_lora(g.llm_load(files[t]), rank=8)
            label = f"LoRA step, {t} base"
            steps[label], s = compiled_step(lora, batch)
            memory[label] = (held_bytes(lora), s.buffer_bytes)
    torch = torch_or_none()
    if torch is not None:
        steps["PyTorch full f32 step"] = torch_step(torch, c, seq)
    print(f"loadavg before: {loadavg()}")
    times = interleaved({k: (fn, 1) for k, fn in steps.items()}, repeats=args.repeats, warmup=1)
    print(f"loadavg after: {loadavg()}")
    ref = times["full f32 step"]
    print("  (ms/step; ratio to the full f32 step)")
    for label, seconds in times.items():
        row(label, seconds, ref)
    print("  (MB: the model's tensors + the compiled step's compute buffer; optimizer state not included)")
    for label, (held, buf) in memory.items():
        print(f"  {label:<44} {held / 2**20:8.1f} + {buf / 2**20:8.1f}")
    print(f"summary: LoRA step q8_0 {times['LoRA step, q8_0 base'] / ref:.2f}x, "
          f"q4_K {times['LoRA step, q4_K base'] / ref:.2f}x, f32 base {times['LoRA step, f32 base'] / ref:.2f}x "
          "the full f32 step" + (f"; q8_0 {times['LoRA step, q8_0 base'] / times['PyTorch full f32 step']:.2f}x "
                                 "PyTorch's full f32 step" if torch is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
