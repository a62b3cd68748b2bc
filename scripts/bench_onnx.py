"""ggmlpy's ONNX import against onnxruntime (CPU provider), same thread count, one process.

    python scripts/bench_onnx.py [--threads 1 2] [--batch 1 8] [--seq 128] [--reps 10] [--cpu-time]
                                 [--dynamo] [--models resnet18 encoder vit lstm] [--device cpu|cuda|vulkan]
    python scripts/bench_onnx.py --zoo [--threads 1] [--reps 10] [--cpu-time]

Models are exported from PyTorch with random weights (no downloads): ResNet-18 at 224x224, a
BERT-style encoder (4 layers, d=256, 4 heads, FFN 1024) at sequence 128, a small ViT (16x16 patches
of a 224x224 image, 4 layers, d=192, 3 heads, MLP 768) and a 2-layer LSTM classifier (100 steps of
64 features, hidden 128, 10 classes), by torch's TorchScript exporter (--dynamo: its default one,
which needs onnxscript). Each thread count of --threads is a pass over every model. The two runtimes alternate
(--reps interleaved rounds after a warm-up, so both see the same machine load; 3 calls a turn after
a 0.1 s pause, the first not counted, so that neither is timed while the other's idle threads still
spin); prints the best and the median ms per inference, their ratios ggmlpy / onnxruntime, and
/proc/loadavg before and after. The last line, for scripts, is
`summary: resnet18 b1 1.27x, b8 1.28x, encoder 0.93x, vit 1.22x, lstm 1.10x onnxruntime (1 thread)`:
the best-time ratios of the first thread count.
--cpu-time measures process CPU time instead of wall time: with --threads 1 it is what a shared,
busy machine can measure reliably (wall time there depends on who else runs).
--device runs ggmlpy on a GPU (CUDA, Vulkan) against onnxruntime's CPU provider (the wheel the
tests use has no GPU provider): the ratio then says what the GPU buys over onnxruntime on this CPU.
--zoo times the small Model Zoo architectures of tests/onnx_zoo.py instead (Inception v3's stem in
plain torch; torchvision's Inception v3 and transformers' BERT, RoBERTa and GPT-NeoX where those
libraries are installed, each said skipped otherwise); its summary line is
`summary: zoo median 1.10x onnxruntime over 2 models (inception_stem 1.05x, bert 1.15x) (1 thread)`.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from benchlib import interleaved_with_pauses, loadavg, machine  # noqa: E402
from benchmodels import kernels_isa  # noqa: E402


def resnet18():
    import torch.nn as nn

    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = self.b2(self.c2(self.b1(self.c1(x)).relu()))
            return (y + self.down(x)).relu()

    layers, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
        cin = cout
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                         *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))


def encoder(seq):
    import torch
    import torch.nn as nn

    class Enc(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(1000, 256)
            self.pos = nn.Parameter(torch.randn(1, seq, 256) * 0.02)
            layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, activation="gelu", batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)

        def forward(self, ids, mask):
            return self.enc(self.tok(ids) + self.pos, src_key_padding_mask=mask == 0)
    return Enc()


def vit():
    import torch
    import torch.nn as nn

    class ViT(nn.Module):
        def __init__(self, d=192, patch=16, image=224, depth=4, heads=3):
            super().__init__()
            self.embed = nn.Conv2d(3, d, patch, patch)
            self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
            self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, d) * 0.02)
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True,
                                               norm_first=True)
            self.enc = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
            self.head = nn.Linear(d, 1000)

        def forward(self, x):
            t = self.embed(x).flatten(2).transpose(1, 2)
            t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], 1) + self.pos
            return self.head(self.enc(t)[:, 0])
    return ViT()


def lstm_classifier():
    import torch.nn as nn

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(64, 128, num_layers=2, batch_first=True)
            self.head = nn.Linear(128, 10)

        def forward(self, x):
            out, _ = self.lstm(x)
            return self.head(out[:, -1])
    return Classifier()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[len(os.sched_getaffinity(0))])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--cpu-time", action="store_true", help="process CPU time instead of wall time")
    ap.add_argument("--dynamo", action="store_true", help="torch's default exporter (needs onnxscript)")
    ap.add_argument("--models", nargs="+", default=["resnet18", "encoder", "vit", "lstm"],
                    choices=["resnet18", "encoder", "vit", "lstm"])
    ap.add_argument("--device", default="cpu", help="ggmlpy's device (onnxruntime stays on the CPU)")
    ap.add_argument("--zoo", action="store_true", help="the Model Zoo architectures of tests/onnx_zoo.py instead")
    args = ap.parse_args()
    import onnxruntime as ort
    import torch

    import ggmlpy as g
    torch.manual_seed(0)
    tmp = tempfile.mkdtemp()
    clock = time.process_time if args.cpu_time else time.perf_counter
    cases = []  # (label, summary key, model, inputs, input names, feeds)
    paths = {}
    if args.zoo:
        import onnx_zoo
        args.models = []
        for key in onnx_zoo.ZOO:
            try:
                paths[key], feeds = onnx_zoo.build(key, torch, tmp)
            except onnx_zoo.Unavailable as e:
                print(f"{key}: skipped, {e}")
                continue
            cases.append((key, key, None, None, None, feeds))
    if "resnet18" in args.models:
        net = resnet18().eval()
        for bn in net.modules():
            if isinstance(bn, torch.nn.BatchNorm2d):
                bn.running_var.uniform_(0.5, 2.0)
        for bsz in args.batch:
            x = torch.randn(bsz, 3, 224, 224)
            cases.append((f"ResNet-18 batch {bsz}", f"resnet18 b{bsz}", net, (x,), ["image"], {"image": x.numpy()}))
    if "encoder" in args.models:
        enc = encoder(args.seq).eval()
        ids = torch.randint(0, 1000, (1, args.seq))
        mask = torch.ones(1, args.seq, dtype=torch.int64)
        cases.append((f"BERT-style encoder seq {args.seq}", "encoder", enc, (ids, mask), ["ids", "mask"],
                      {"ids": ids.numpy(), "mask": mask.numpy()}))
    if "vit" in args.models:
        x = torch.randn(1, 3, 224, 224)
        cases.append(("ViT (4 layers, d=192)", "vit", vit().eval(), (x,), ["image"], {"image": x.numpy()}))
    if "lstm" in args.models:
        x = torch.randn(1, 100, 64)
        cases.append(("LSTM 2x128, 100 steps", "lstm", lstm_classifier().eval(), (x,), ["x"], {"x": x.numpy()}))
    for name, _, model, inputs, names, _ in cases:
        if model is None:  # exported by its builder
            continue
        paths[name] = os.path.join(tmp, name.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
                                   + ".onnx")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if args.dynamo:
                torch.onnx.export(model, inputs, paths[name], dynamo=True, verbose=False, input_names=names,
                                  output_names=["y"])
            else:
                torch.onnx.export(model, inputs, paths[name], dynamo=False, input_names=names, output_names=["y"],
                                  opset_version=17)
    print(f"machine: {machine()}")
    print(kernels_isa())
    first = {}
    for threads in args.threads:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        print(f"ggmlpy on {args.device}; threads {threads}; {'CPU' if args.cpu_time else 'wall'} time; "
              f"{'dynamo' if args.dynamo else 'TorchScript'} export; loadavg {loadavg()}")
        print(f"{'model':<28} {'ggmlpy ms best/median':>22} {'onnxruntime ms':>16} {'ratio':>11}  max |diff|")
        for name, key, _, _, _, feeds in cases:
            m = g.onnx_load(paths[name], device=args.device, n_threads=threads)
            sess = ort.InferenceSession(paths[name], so, providers=["CPUExecutionProvider"])
            (gb, gm), (ob, om) = interleaved_with_pauses([lambda: g.onnx_run(m, feeds), lambda: sess.run(None, feeds)],
                                             args.reps, clock)
            diff = float(np.abs(next(iter(g.onnx_run(m, feeds).values())) - sess.run(None, feeds)[0]).max())
            print(f"{name:<28} {gb:>10.2f} /{gm:>9.2f} {ob:>7.2f} /{om:>7.2f} {gb / ob:>5.2f}/{gm / om:<5.2f}  "
                  f"{diff:.2e}")
            if threads == args.threads[0]:
                first[key] = gb / ob
        print(f"loadavg after {loadavg()}")
    t0 = args.threads[0]
    if args.zoo:
        print(f"summary: zoo median {np.median(list(first.values())):.2f}x onnxruntime over {len(first)} model"
              f"{'s' if len(first) > 1 else ''} (" + ", ".join(f"{k} {v:.2f}x" for k, v in first.items())
              + f") ({t0} thread{'s' if t0 > 1 else ''})")
        return
    print("summary: " + ", ".join(f"{k} {v:.2f}x" for k, v in first.items()).replace(", resnet18 b", ", b")
          + f" onnxruntime ({t0} thread{'s' if t0 > 1 else ''})")


if __name__ == "__main__":
    main()
