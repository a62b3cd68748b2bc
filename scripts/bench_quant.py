"""Quantized matrix products and GGUF reading, timed on the CPU backend.

    python scripts/bench_quant.py [--n 4096] [--file-mb 1024] [--threads N]

1. Memory bandwidth: a plain numpy copy of a 512 MiB array (bytes read + written per second).
2. ggml_mul_mat of an n x n weight by 1 and by 32 vectors for f32, f16, q8_0, q4_0 and q4_K:
   GFLOP/s, effective GB/s of weight traffic (weight bytes / time) and the weight bytes. A batch-1
   product reads every weight once and does 2 flops per weight, so it is memory-bound: the
   ratio to the numpy copy's bandwidth says how close each type gets to the machine.
3. gguf_load + gguf_tensor_data of every tensor of a --file-mb file of f32 and q4_K tensors,
   against the file size / the read rate of a plain sequential read of the same file.
"""
from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

from benchlib import interleaved, loadavg, timed

import ggmlpy as g
from ggmlpy.core.threads import get_num_threads
from ggmlpy.bindings import lib

TYPES = ("f32", "f16", "q8_0", "q4_0", "q4_K")


def numpy_bandwidth(mib: int = 512) -> float:
    src = np.ones(mib << 18, np.float32)
    dst = np.empty_like(src)
    t = timed(lambda: np.copyto(dst, src), repeats=5)
    return 2 * src.nbytes / t / 1e9


def matmul_case(name: str, n: int, batch: int, w: np.ndarray, threads: int):
    """(compute callable, weight bytes): one graph y = W x on the CPU backend, computed directly."""
    tid = g.quant.types.type_id(name)
    ctx = g.ggml_init(g.ggml_row_size(tid, n) * n + 4 * n * batch * 2 + (64 << 20))
    a = g.ggml_new_tensor_2d(ctx, tid, n, n)
    g.ggml_set_f32(a, w)
    x = g.ggml_new_from_numpy(ctx, np.random.default_rng(1).standard_normal((batch, n)).astype(np.float32))
    gf = g.ggml_build_forward_expand(ctx, g.ggml_mul_mat(ctx, a, x))
    g.ggml_graph_compute(ctx, gf, n_threads=threads)  # checked once; then timed without the checks
    backend = g.ggml_backend_cpu_init()
    backend.set_n_threads(threads)

    def run():
        lib.ggml_backend_graph_compute(backend.ptr, gf.ptr)
    run._keep = (ctx, backend, gf)
    return run, g.ggml_nbytes(a)


def bench_matmul(n: int, threads: int, bw: float) -> None:
    w = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    print(f"\nggml_mul_mat, weight {n}x{n}, CPU backend, {threads} threads "
          f"(numpy copy: {bw:.1f} GB/s read+write)")
    print(f"{'type':6} {'weight MiB':>10} | {'batch 1 ms':>10} {'GFLOP/s':>8} {'GB/s':>6} {'of copy':>7} "
          f"| {'batch 32 ms':>11} {'GFLOP/s':>8} {'GB/s':>6}")
    results = {}
    for batch in (1, 32):
        cases = {name: matmul_case(name, n, batch, w, threads) for name in TYPES}
        times = interleaved({name: (run, 3 if batch == 1 else 1) for name, (run, _) in cases.items()}, repeats=7)
        for name, (_, nbytes) in cases.items():
            results[(name, batch)] = (times[name], nbytes)
    for name in TYPES:
        (t1, nbytes), (t32, _) = results[(name, 1)], results[(name, 32)]
        print(f"{name:6} {nbytes / 2**20:10.1f} | {t1 * 1e3:10.3f} {2 * n * n / t1 / 1e9:8.1f} "
              f"{nbytes / t1 / 1e9:6.1f} {nbytes / t1 / 1e9 / bw:7.0%} | {t32 * 1e3:11.3f} "
              f"{2 * n * n * 32 / t32 / 1e9:8.1f} {nbytes / t32 / 1e9:6.1f}")
    f32 = results[("f32", 1)][0]
    print("batch-1 speed-up over f32: " + ", ".join(f"{name} {f32 / results[(name, 1)][0]:.2f}x"
                                                    for name in TYPES[1:]))


def bench_gguf(file_mb: int) -> None:
    import gguf
    n = 4096
    rows = max(1, (file_mb << 20) // (n * 4 + n * 144 // 256))  # each row once as f32, once as q4_K
    chunk = 1024
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.gguf")
        w = gguf.GGUFWriter(path, "bench")
        rng = np.random.default_rng(0)
        i = 0
        for start in range(0, rows, chunk):
            m = min(chunk, rows - start)
            x = rng.standard_normal((m, n)).astype(np.float32)
            w.add_tensor(f"blk.{i}.f32.weight", x)
            w.add_tensor(f"blk.{i}.q4_K.weight", g.ggml_quantize_chunk("q4_K", x).reshape(m, -1),
                         raw_dtype=gguf.GGMLQuantizationType.Q4_K)
            i += 1
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        size = os.path.getsize(path)

        def plain_read():
            with open(path, "rb", buffering=0) as f:
                while f.read(64 << 20):
                    pass

        def load_all():
            with g.gguf_load(path) as f:
                for name in g.gguf_tensor_names(f):
                    g.gguf_tensor_data(f, name)

        t_read = timed(plain_read, repeats=3, warmup=1)
        t_load = timed(load_all, repeats=3, warmup=1)
        n_el = rows * n * 2
        print(f"\ngguf_load + gguf_tensor_data of all {2 * i} tensors ({n_el / 1e6:.0f} M values, half q4_K) "
              f"of a {size / 2**20:.0f} MiB file (in the page cache):")
        print(f"  plain read {t_read * 1e3:.0f} ms ({size / t_read / 1e9:.2f} GB/s); gguf_load + all tensors "
              f"{t_load * 1e3:.0f} ms = {t_load / t_read:.1f}x the plain read "
              f"({n_el * 4 / t_load / 1e9:.2f} GB/s of float32 out)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--file-mb", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=get_num_threads())
    args = ap.parse_args()
    print(f"ggml {g.ggml_version()}, loadavg {loadavg()}")
    bw = numpy_bandwidth()
    bench_matmul(args.n, args.threads, bw)
    bench_gguf(args.file_mb)
    print(f"loadavg {loadavg()}")


if __name__ == "__main__":
    main()
