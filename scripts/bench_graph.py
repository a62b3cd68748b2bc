#!/usr/bin/env python3
"""Graph mode against eager mode and PyTorch CPU: one training step (forward, backward, Adam)
of a 12-layer relu MLP with mse loss, measured in one run.

  big:   256x256 layers, batch 256 (target: graph <= 0.7x PyTorch's step time)
  small: 64x64 layers, batch 32   (target: graph >= 3x faster than eager)
Also prints the graph's compute-buffer size (ggml_gallocr) and its GFLOP/s, next to
the mul_mat throughput of the same build (the practical ceiling; scripts/bench_ops.py).
The contenders are timed in interleaved rounds: this machine's speed drifts by 15-20%.
"""
import numpy as np

from benchlib import interleaved, timed
from benchmodels import g, mlp_data, torch_or_none


def ggml_setup(weights, x, y):
    ws = [g.ag_param(w) for w in weights]
    xt, yt = g.ag_tensor(x), g.ag_tensor(y)

    def loss_fn(xx, yy):
        h = xx
        for w in ws:
            h = g.ag_relu(g.ag_matmul(w, h))
        return g.ag_mse_loss(h, yy)
    return ws, xt, yt, loss_fn


def eager_step(weights, x, y):
    ws, xt, yt, loss_fn = ggml_setup(weights, x, y)
    opt = g.optimizer_adam(ws, lr=1e-4)

    def step():
        with g.with_grad_tape():
            loss = loss_fn(xt, yt)
        opt.step(g.backward(loss))
        opt.zero_grad()
    return step


def graph_step(weights, x, y, backward="auto"):
    ws, xt, yt, loss_fn = ggml_setup(weights, x, y)
    compiled = g.ag_compile(loss_fn, [xt, yt], optimizer=g.optimizer_adam(ws, lr=1e-4), backward=backward)
    return (lambda: compiled(xt, yt)), compiled


def torch_step(torch, weights, x, y):
    ws = [torch.tensor(w, dtype=torch.float32, requires_grad=True) for w in weights]
    xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    opt = torch.optim.Adam(ws, lr=1e-4)

    def step():
        h = xt
        for w in ws:
            h = torch.relu(w @ h)
        loss = torch.mean((h - yt) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def matmul_ceiling():
    """mul_mat 1024^2 on a CPU backend buffer (64-byte aligned, as bench_ops.py's backend path)."""
    backend = g.ggml_backend_cpu_init()
    backend.set_n_threads(g.get_backend("cpu").n_threads)
    ctx = g.ggml_init(1 << 20, no_alloc=True)
    a = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 1024, 1024)
    b = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 1024, 1024)
    c = g.ggml_mul_mat(ctx, a, b)
    g.ggml_backend_alloc_ctx_tensors(ctx, backend)
    g.ggml_set_f32(a, np.random.rand(1024, 1024))
    g.ggml_set_f32(b, np.random.rand(1024, 1024))
    gf = g.ggml_build_forward_expand(ctx, c)
    t = timed(lambda: g.ggml_backend_graph_compute(backend, gf), repeats=5)
    return 2 * 1024 ** 3 / t / 1e9


def node_profile(compiled, top=6):
    """Where the graph's time goes: each node computed alone (on the backend the graph gives it),
    summed by kind. The nodes are big enough for the sum to be close to the whole graph's time."""
    from collections import defaultdict
    from ggmlpy.bindings import ffi, lib
    plan = next(iter(compiled.plans.values()))
    blas = plan.sched.backends[0].ptr if plan.sched is not None else None  # it computes OUT_PROD
    ctx = lib.ggml_init({"mem_size": 1 << 20, "mem_buffer": ffi.NULL, "no_alloc": True})
    by_kind = defaultdict(lambda: [0, 0.0])
    for i in range(lib.ggml_graph_n_nodes(plan.builder.graph)):
        node = lib.ggml_graph_node(plan.builder.graph, i)
        if node.op in (lib.GGML_OP_NONE, lib.GGML_OP_VIEW, lib.GGML_OP_RESHAPE, lib.GGML_OP_PERMUTE,
                       lib.GGML_OP_TRANSPOSE):
            continue
        one = lib.ggml_new_graph_custom(ctx, 1, False)
        lib.ggml_graph_add_node(one, node)
        backend = blas if blas is not None and node.op == lib.GGML_OP_OUT_PROD else plan.compiled.backend.ptr
        t = timed(lambda: lib.ggml_backend_graph_compute(backend, one), repeats=15)
        kind = ffi.string(lib.ggml_op_desc(node)).decode()
        by_kind[kind][0] += 1
        by_kind[kind][1] += t
    lib.ggml_free(ctx)
    total = sum(t for _, t in by_kind.values())
    print(f"  where the graph's time goes (each node alone; sum {total * 1e3:.2f} ms):")
    for kind, (n, t) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"    {kind:<16} {n:3d} nodes {t * 1e3:7.2f} ms  ({t / n * 1e6:6.1f} us each)")


def main():
    torch = torch_or_none()
    for label, width, batch in (("big: 12 x 256x256, batch 256", 256, 256), ("small: 12 x 64x64, batch 32", 64, 32)):
        weights, x, y = mlp_data(12, width, batch)
        gstep, compiled = graph_step(weights, x, y)
        ostep, ocompiled = graph_step(weights, x, y, backward="ggml")
        fns = {"eager": (eager_step(weights, x, y), 3), "graph": (gstep, 3), "ggml": (ostep, 3)}
        if torch:
            fns["torch"] = (torch_step(torch, weights, x, y), 3)
        t = interleaved(fns, repeats=9)  # the machine drifts: every contender sees the same drift
        t_eager, t_graph, t_ggml, t_torch = t["eager"], t["graph"], t["ggml"], t.get("torch")
        flops = 12 * 3 * 2 * width * width * batch
        print(label)
        print(f"  graph   {t_graph * 1e3:8.2f} ms   ({flops / t_graph / 1e9:.1f} GFLOP/s, "
              f"compute buffer {compiled.compute_buffer_bytes / 2**20:.2f} MiB, backward: {compiled.last_backward})")
        print(f"  graph, ggml's own backward {t_ggml * 1e3:8.2f} ms   ({flops / t_ggml / 1e9:.1f} GFLOP/s, "
              f"compute buffer {ocompiled.compute_buffer_bytes / 2**20:.2f} MiB)")
        print(f"  eager   {t_eager * 1e3:8.2f} ms   eager/graph = {t_eager / t_graph:.2f}")
        if t_torch:
            print(f"  PyTorch {t_torch * 1e3:8.2f} ms   graph/PyTorch = {t_graph / t_torch:.2f}")
        if width == 256:
            node_profile(compiled)
    print(f"mul_mat 1024^2 ceiling on this build: {matmul_ceiling():.1f} GFLOP/s")


if __name__ == "__main__":
    main()
