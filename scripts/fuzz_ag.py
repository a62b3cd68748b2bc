"""Fuzz the ag_* API as a hostile user would: every public ag_* function, layer, optimizer and
the tape and forward-AD entry points, called with random tensors of every dtype (i32 included),
mis-shaped tensors, numbers, arrays, None and strings, with devices released and switched and
tapes reset in between. Any Python exception is a clear refusal; only a dead process is a failure.

    python scripts/fuzz_ag.py [--calls N] [--seed S]

A second pass aims at the batch and head axes: products, permutes, reshapes, masks, slices,
reductions over axes, class-index losses, embeddings and attention on 2-D to 4-D tensors of
mismatched shapes, with backward; there only a GGMLError (or an IndexError from indexing) is a
checked refusal.

Prints `calls N, refused R, crashes 0, unchecked inputs U` and a count per exception type; an
AttributeError, IndexError or KeyError counts as an unchecked input (the refusal says nothing
useful). Run it in a child process
(tests/test_fuzz_ag.py does) so that an abort is counted, not fatal.
"""
from __future__ import annotations

import argparse
import collections
import sys
import warnings

import numpy as np

import ggmlpy as g

# Exceptions that mean "nobody checked this input": a refusal should say what was wrong.
UNCHECKED = ("AttributeError", "IndexError", "KeyError", "ZeroDivisionError", "UnboundLocalError", "NameError")
SKIP = {"ag_fit", "ag_save_model", "ag_load_model", "ag_evaluate"}  # files and loops: covered elsewhere
DTYPES = ["f32", "f32", "f32", "f16", "bf16", "i32"]


def fuzz(calls: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    g.manual_seed(seed)
    fns = sorted(n for n in g.__all__ if n.startswith("ag_") and n not in SKIP) + [
        "backward", "with_grad_tape", "make_dual", "jvp", "hvp", "optimizer_sgd", "optimizer_adam",
        "clip_grad_norm", "zero_grad", "release_device", "ag_device", "dp_train", "ggml_set_seed",
        "lr_scheduler_cosine"]
    pool: list = []

    def tensor():
        if pool and rng.random() < 0.5:
            return pool[rng.integers(len(pool))]
        shape = tuple(int(d) for d in rng.integers(1, 5, size=2 if rng.random() < 0.6 else int(rng.integers(3, 5))))
        dtype = DTYPES[rng.integers(len(DTYPES))]
        t = g.ag_tensor(rng.normal(size=shape) * 3 if dtype != "i32" else rng.integers(-3, 9, size=shape),
                        dtype=dtype, requires_grad=dtype != "i32" and bool(rng.random() < 0.5))
        pool.append(t)
        del pool[:-12]
        return t

    def arg():
        r = rng.random()
        if r < 0.55:
            return tensor()
        if r < 0.65:
            return float(rng.normal())
        if r < 0.72:
            return int(rng.integers(-2, 5))
        if r < 0.8:
            return rng.normal(size=tuple(int(d) for d in rng.integers(1, 4, size=rng.integers(1, 3))))
        if r < 0.85:
            return None
        if r < 0.9:
            return ["relu", "cpu", "f16", "x"][rng.integers(4)]
        if r < 0.95:
            return [tensor() for _ in range(rng.integers(0, 3))]
        return lambda *a: a[0] if a else None

    refused: collections.Counter = collections.Counter()
    unchecked: list = []
    for i in range(calls):
        name = fns[rng.integers(len(fns))]
        fn = getattr(g, name)
        args = [arg() for _ in range(rng.integers(0, 4))]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if name == "with_grad_tape":
                    with g.with_grad_tape():
                        out = tensor()
                        for _ in range(3):
                            out = getattr(g, fns[rng.integers(len(fns))])(out, *[arg() for _ in range(rng.integers(0, 2))])
                elif name == "release_device":
                    g.release_device("cpu")
                elif name == "ag_device":
                    g.ag_device("cpu" if rng.random() < 0.8 else args[0] if args else None)
                else:
                    out = fn(*args)
                    if callable(out) and not isinstance(out, type) and rng.random() < 0.5:  # layers
                        out = out(*[arg() for _ in range(rng.integers(1, 3))])
                    if isinstance(out, g.AGTensor):
                        out.numpy()
                        pool.append(out)
        except Exception as e:  # a refusal, with a message: what a bad call must get
            refused[type(e).__name__] += 1
            if type(e).__name__ in UNCHECKED:
                unchecked.append(f"{name}: {type(e).__name__}: {e}")
    return {"calls": calls, "refused": sum(refused.values()), "by_type": dict(refused), "unchecked": unchecked}


def fuzz_batched(calls: int, seed: int) -> dict:
    """The batched ops on 2-D to 4-D tensors of random (often mismatched) shapes and dtypes."""
    rng = np.random.default_rng(seed + 1000)

    def t():
        shape = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(2, 5))))
        dtype = ["f32", "f32", "f16", "i32"][rng.integers(4)]
        data = rng.integers(-1, 4, size=shape) if dtype == "i32" else rng.normal(size=shape)
        return g.ag_tensor(data, dtype=dtype, requires_grad=dtype != "i32" and rng.random() < 0.5)

    def ints(lo, hi, n):
        return [int(v) for v in rng.integers(lo, hi, size=n)]
    ops = [
        lambda: g.ag_matmul(t(), t(), transpose_a=bool(rng.random() < .5), transpose_b=bool(rng.random() < .5)),
        lambda: g.ag_permute(t(), *ints(-1, 4, int(rng.integers(1, 5)))),
        lambda: g.ag_reshape(t(), *ints(-1, 4, int(rng.integers(2, 6)))),
        lambda: g.ag_softmax(t(), mask=t() if rng.random() < .5 else None, scale=float(rng.uniform(-1, 2)),
                             causal=bool(rng.random() < .5)),
        lambda: g.ag_sum(t(), axis=tuple(ints(-4, 5, int(rng.integers(1, 3))))),
        lambda: g.ag_mean(t(), axis=int(rng.integers(-4, 5))),
        lambda: g.ag_slice(t(), *[slice(*sorted(ints(-1, 4, 2))) for _ in range(int(rng.integers(1, 5)))]),
        lambda: g.ag_concat(t(), t(), int(rng.integers(0, 6))),
        lambda: [g.ag_add, g.ag_sub, g.ag_mul, g.ag_div][rng.integers(4)](t(), t()),
        lambda: g.ag_layer_norm(t()),
        lambda: g.ag_softmax_cross_entropy_loss(t(), t() if rng.random() < .7 else rng.integers(-1, 4, size=ints(1, 4, 2))),
        lambda: g.ag_embedding(3, 2)(t(), batched=bool(rng.random() < .5)),
        lambda: g.ag_multihead_attention(2, int(rng.integers(1, 3)), causal=bool(rng.random() < .5))(
            t(), t() if rng.random() < .3 else None,
            key_padding_mask=rng.integers(0, 2, size=ints(1, 4, 2)) if rng.random() < .3 else None),
    ]
    refused: collections.Counter = collections.Counter()
    unchecked: list = []
    for _ in range(calls):
        op = rng.integers(len(ops) + 1)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with g.with_grad_tape():
                    if op == len(ops):  # indexing: an IndexError is the natural refusal
                        try:
                            out = t()[tuple(ints(-3, 4, int(rng.integers(1, 5))))]
                        except IndexError:
                            refused["IndexError"] += 1
                            continue
                    else:
                        out = ops[op]()
                    if out.requires_grad and out.dtype != "i32" and rng.random() < 0.7:
                        g.backward(g.ag_sum(out))
                    out.numpy()
        except Exception as e:
            refused[type(e).__name__] += 1
            if not isinstance(e, g.GGMLError):
                unchecked.append(f"batched op {op}: {type(e).__name__}: {e}")
    return {"calls": calls, "refused": sum(refused.values()), "by_type": dict(refused), "unchecked": unchecked}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    r = fuzz(args.calls, args.seed)
    nd = fuzz_batched(args.calls, args.seed)
    for k, v in nd["by_type"].items():
        r["by_type"][k] = r["by_type"].get(k, 0) + v
    r["calls"] += nd["calls"]
    r["refused"] += nd["refused"]
    r["unchecked"] += nd["unchecked"]
    print(f"calls {r['calls']}, refused {r['refused']}, crashes 0, unchecked inputs {len(r['unchecked'])}")
    for k, v in sorted(r["by_type"].items(), key=lambda kv: -kv[1]):
        print(f"  {k}: {v}")
    for line in r["unchecked"][:20]:
        print("  unchecked:", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
