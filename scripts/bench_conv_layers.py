"""ResNet-18's convolution layers one at a time: ggmlpy against onnxruntime (CPU provider), interleaved.

    python scripts/bench_conv_layers.py [--threads 1 2] [--batch 1 8] [--reps 10] [--only 14x14 7x7]

Each distinct convolution of ResNet-18 at 224x224 (BatchNorm folded: a bias; ReLU fused as the
model has it) is exported as a one-node ONNX model with random weights and run by both runtimes
in turn (bench_onnx.interleaved: same load for both). Prints per layer the kernel ggmlpy chose,
the best ms of each, GFLOP/s, the ratio ggmlpy / onnxruntime, and the layer's share of the
model's convolution time (its count in ResNet-18 times its ms), then the totals and /proc/loadavg.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from benchlib import interleaved_with_pauses, loadavg

# (input size, in channels, out channels, kernel, stride, ReLU, residual, count in ResNet-18)
LAYERS = [
    (224, 3, 64, 7, 2, True, False, 1),
    (56, 64, 64, 3, 1, True, False, 2),
    (56, 64, 64, 3, 1, True, True, 2),
    (56, 64, 128, 3, 2, True, False, 1),
    (56, 64, 128, 1, 2, False, False, 1),
    (28, 128, 128, 3, 1, True, False, 1),
    (28, 128, 128, 3, 1, True, True, 2),
    (28, 128, 256, 3, 2, True, False, 1),
    (28, 128, 256, 1, 2, False, False, 1),
    (14, 256, 256, 3, 1, True, False, 1),
    (14, 256, 256, 3, 1, True, True, 2),
    (14, 256, 512, 3, 2, True, False, 1),
    (14, 256, 512, 1, 2, False, False, 1),
    (7, 512, 512, 3, 1, True, False, 1),
    (7, 512, 512, 3, 1, True, True, 2),
]


def layer_model(path, batch, size, cin, cout, k, s, relu, residual):
    """A one-conv ONNX model (Conv with bias, then Add of a second input and Relu as asked)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    p = k // 2
    osz = (size + 2 * p - k) // s + 1
    w = (rng.standard_normal((cout, cin, k, k)) * (2.0 / (cin * k * k)) ** 0.5).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32) * 0.1
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s],
                              pads=[p, p, p, p])]
    last = "c"
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, cin, size, size])]
    if residual:
        nodes.append(helper.make_node("Add", [last, "r"], ["a"]))
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [batch, cout, osz, osz]))
        last = "a"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    graph = helper.make_graph(nodes, "conv", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, cout, osz, osz])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    feeds = {"x": rng.standard_normal((batch, cin, size, size)).astype(np.float32)}
    if residual:
        feeds["r"] = rng.standard_normal((batch, cout, osz, osz)).astype(np.float32)
    flops = 2.0 * batch * cout * osz * osz * cin * k * k
    return feeds, flops, osz


def kind_of(size, cin, cout, k, s):
    from ggmlpy import kernels
    kk = kernels.get()
    if kk is None:
        return "-"
    p = k // 2
    osz = (size + 2 * p - k) // s + 1
    kind = kk.packed_conv_kind((osz, osz), cout, *kernels.direct_planes((osz, osz), (k, k), (s, s), (1, 1), cin),
                               stride=s, taps=cin * k * k, unpadded=p == 0)
    return kind or "blas"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--only", nargs="*", default=None, help="output sizes to run, e.g. 14x14 7x7")
    args = ap.parse_args()
    import onnxruntime as ort

    import ggmlpy as g
    tmp = tempfile.mkdtemp()
    for threads in args.threads:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        for batch in args.batch:
            print(f"threads {threads}, batch {batch}; loadavg {loadavg()}")
            print(f"{'layer':<30} {'kind':<8} {'ggmlpy ms':>9} {'ort ms':>8} {'GF/s':>6} {'ort':>6} {'ratio':>6}")
            tg = to = 0.0
            for i, (size, cin, cout, k, s, relu, res, count) in enumerate(LAYERS):
                path = os.path.join(tmp, f"l{i}_{batch}.onnx")
                feeds, flops, osz = layer_model(path, batch, size, cin, cout, k, s, relu, res)
                if args.only and f"{osz}x{osz}" not in args.only:
                    continue
                m = g.onnx_load(path, n_threads=threads)
                sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
                (gb, _), (ob, _) = interleaved_with_pauses([lambda: g.onnx_run(m, feeds), lambda: sess.run(None, feeds)],
                                               args.reps, time.perf_counter)
                diff = float(np.abs(g.onnx_run(m, feeds)["y"] - sess.run(None, feeds)[0]).max())
                tg, to = tg + count * gb, to + count * ob
                label = f"{cin}->{cout} {k}x{k}/{s} {osz}x{osz}{' +r' if res else ''} x{count}"
                print(f"{label:<30} {kind_of(size, cin, cout, k, s):<8} {gb:>9.3f} {ob:>8.3f} "
                      f"{flops / gb * 1e-6:>6.0f} {flops / ob * 1e-6:>6.0f} {gb / ob:>6.2f}  {diff:.1e}")
            print(f"{'all convolutions (x count)':<39} {tg:>9.3f} {to:>8.3f} {'':>13} {tg / to:>6.2f}")
            print(f"loadavg after {loadavg()}")


if __name__ == "__main__":
    main()
