#!/usr/bin/env python3
"""Gradient checkpointing on the seed's setting: a 12-layer 256x256 relu stack, batch 256.

Eagerly: for no checkpointing, every block checkpointed (blocks of 2, 3 and 4 layers) and every
second block checkpointed, prints tape_bytes(), the peak pass-pool bytes during backward, and the
step time (forward + backward, timed interleaved) as a ratio to the plain step. Targets: checkpointed tape <= 0.2x
plain; checkpointed step <= 1.4x plain.

Compiled (ag_compile with an SGD update): the compute buffer ggml allocates for the step
(step.buffer_bytes) and the step time, plain against every block checkpointed, timed
interleaved; with --gpt also the char-GPT of bench_transformer.py with 8 blocks, every block
checkpointed. Targets: the best of the 2-, 3- and 4-layer plans at most 0.65x plain's buffer and
1.35x its time; the GPT at most 0.35x and 1.35x. Ends with one `summary:` line.
"""
import argparse
import os
import sys

from benchlib import interleaved, loadavg
from benchmodels import g, ggml_mlp, mlp_data

pool = None


def make_step(ws, xt, yt, block, every):
    blocks = [ws[i:i + block] for i in range(0, len(ws), block)]

    def run_block(h, blk):
        for w in blk:
            h = g.ag_relu(g.ag_matmul(w, h))
        return h

    def forward():
        h = xt
        for i, blk in enumerate(blocks):
            if every and i % every == every - 1:
                h = g.ag_checkpoint(lambda t, blk=blk: run_block(t, blk), h)
            else:
                h = run_block(h, blk)
        return g.ag_mse_loss(h, yt)

    state = {}

    def step():
        with g.with_grad_tape():
            loss = forward()
        state["tape"] = g.tape_bytes()
        pool.reset_peak()
        g.backward(loss)
        state["peak"] = pool.reset_peak()
    return step, state


def compiled_step(weights, x, y, block):
    """The compiled SGD step of the stack, every `block` layers one checkpoint (None: plain)."""
    ws, xt, yt, _ = ggml_mlp(weights, x, y)
    blocks = [ws[i:i + (block or len(ws))] for i in range(0, len(ws), block or len(ws))]

    def run_block(h, blk):
        for w in blk:
            h = g.ag_relu(g.ag_matmul(w, h))
        return h

    def loss_fn(a, b):
        h = a
        for blk in blocks:
            h = g.ag_checkpoint(lambda t, blk=blk: run_block(t, blk), h) if block else run_block(h, blk)
        return g.ag_mse_loss(h, b)
    step = g.ag_compile(loss_fn, [xt, yt], optimizer=g.optimizer_sgd(ws, lr=1e-3))
    return step, (lambda: step(xt, yt))


def gpt_steps():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_transformer as bt
    data = bt.batches(bt.corpus(), 4)
    out = {}
    for ckpt in (False, True):
        model = bt.ggml_model(8, checkpoint=ckpt)
        opt = g.optimizer_adamw(model.parameters(), lr=bt.LR, weight_decay=bt.WD)
        x0, y0 = (g.ag_tensor(a, dtype="i32") for a in data[0])
        step = g.ag_compile(lambda x, y, model=model: model.loss(x, y), [x0, y0], optimizer=opt, clip_grad=bt.CLIP)
        out[ckpt] = (step, lambda step=step, x0=x0, y0=y0: step(x0, y0))
    return out


def compiled_rows(weights, x, y, gpt: bool) -> str:
    plans = {"plain": None, "every block (2 layers)": 2, "every block (3 layers)": 3, "every block (4 layers)": 4}
    steps = {label: compiled_step(weights, x, y, block) for label, block in plans.items()}
    times = interleaved({label: (run, 1) for label, (_, run) in steps.items()}, repeats=9)
    base_b, base_t = steps["plain"][0].buffer_bytes, times["plain"]
    print("compiled (ag_compile, SGD update in the graph)")
    print(f"  {'':<32}{'buffer MB':>10}{'ratio':>7}{'step ms':>9}{'ratio':>7}")
    ratios = {}
    for label, (step, _) in steps.items():
        ratios[label] = (step.buffer_bytes / base_b, times[label] / base_t)
        print(f"  {label:<32}{step.buffer_bytes / 2**20:>10.2f}{ratios[label][0]:>7.2f}"
              f"{times[label] * 1e3:>9.1f}{ratios[label][1]:>7.2f}")
    best = min((r for label, r in ratios.items() if label != "plain"))  # least memory, then least time
    line = f"compiled checkpoint memory {best[0]:.2f}x plain, time {best[1]:.2f}x plain"
    if gpt:
        steps = gpt_steps()
        t = interleaved({ck: (run, 1) for ck, (_, run) in steps.items()}, repeats=5, warmup=1)
        mem = steps[True][0].buffer_bytes / steps[False][0].buffer_bytes
        print(f"  char-GPT, 8 blocks, every block checkpointed: buffer {steps[True][0].buffer_bytes / 2**20:.1f} MB "
              f"({mem:.2f}x plain), step {t[True] * 1e3:.0f} ms ({t[True] / t[False]:.2f}x plain)")
        line += f"; gpt memory {mem:.2f}x, time {t[True] / t[False]:.2f}x"
    return line


def main():
    global pool
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpt", action="store_true", help="also the 8-block char-GPT, compiled")
    args = ap.parse_args()
    weights, x, y = mlp_data()
    ws, xt, yt, _ = ggml_mlp(weights, x, y)
    pool = g.runtime.state.STATE.context().pass_pool
    configs = [("plain", 1, None), ("every block (2 layers)", 2, 1), ("every block (3 layers)", 3, 1),
               ("every block (4 layers)", 4, 1), ("every second block (2 layers)", 2, 2)]
    steps = {label: make_step(ws, xt, yt, block, every) for label, block, every in configs}
    times = interleaved({label: (step, 1) for label, (step, _) in steps.items()}, repeats=9)
    rows = [(label, times[label], state["tape"], state["peak"]) for label, (_, state) in steps.items()]
    _, base_t, base_tape, base_peak = rows[0]
    print("12-layer 256x256 relu MLP, batch 256, f32")
    print(f"  {'':<32}{'tape MB':>9}{'ratio':>7}{'backward peak MB':>18}{'ratio':>7}{'step ms':>9}{'ratio':>7}")
    for label, t, tape, peak in rows:
        print(f"  {label:<32}{tape / 2**20:>9.2f}{tape / base_tape:>7.2f}{peak / 2**20:>18.2f}"
              f"{peak / base_peak:>7.2f}{t * 1e3:>9.1f}{t / base_t:>7.2f}")
    best = min(rows[1:4], key=lambda r: r[2])
    print(f"  eager: tape {best[2] / base_tape:.2f}x plain with {best[0]} (target <= 0.2), "
          f"step {best[1] / base_t:.2f}x plain (target <= 1.4)")
    line = compiled_rows(weights, x, y, args.gpt)
    print(f"load {loadavg()}")
    print(f"summary: {line}")


if __name__ == "__main__":
    main()
