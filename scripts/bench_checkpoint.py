#!/usr/bin/env python3
"""Gradient checkpointing on the seed's setting: a 12-layer 256x256 relu stack, batch 256.

For no checkpointing, every block checkpointed (blocks of 2, 3 and 4 layers) and every
second block checkpointed, prints tape_bytes(), the peak pass-pool bytes during
backward, and the step time (forward + backward) as a ratio to the plain step.
Targets (issue 4): checkpointed tape <= 0.2x plain; checkpointed step <= 1.4x plain.
"""
from benchlib import g, ggml_mlp, mlp_data, timed

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


def main():
    global pool
    weights, x, y = mlp_data()
    ws, xt, yt, _ = ggml_mlp(weights, x, y)
    pool = g.runtime.state.STATE.context().pass_pool
    configs = [("plain", 1, None), ("every block (2 layers)", 2, 1), ("every block (3 layers)", 3, 1),
               ("every block (4 layers)", 4, 1), ("every second block (2 layers)", 2, 2)]
    rows = []
    for label, block, every in configs:
        step, state = make_step(ws, xt, yt, block, every)
        rows.append((label, timed(step, repeats=9), state["tape"], state["peak"]))
    _, base_t, base_tape, base_peak = rows[0]
    print("12-layer 256x256 relu MLP, batch 256, f32")
    print(f"  {'':<32}{'tape MB':>9}{'ratio':>7}{'backward peak MB':>18}{'ratio':>7}{'step ms':>9}{'ratio':>7}")
    for label, t, tape, peak in rows:
        print(f"  {label:<32}{tape / 2**20:>9.2f}{tape / base_tape:>7.2f}{peak / 2**20:>18.2f}"
              f"{peak / base_peak:>7.2f}{t * 1e3:>9.1f}{t / base_t:>7.2f}")
    best = min(rows[1:4], key=lambda r: r[2])
    print(f"summary: tape {best[2] / base_tape:.2f}x plain with {best[0]} (target <= 0.2), "
          f"step {best[1] / base_t:.2f}x plain (target <= 1.4)")


if __name__ == "__main__":
    main()
