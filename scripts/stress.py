"""Stress ggmlpy as a hostile user would and count what happens: threads, fuzzing, files, long runs,
and the front ends (one ONNX model in threads, hostile ONNX graphs, optimizer settings, NaN through
every ReLU, Ctrl-C at random moments, RPC servers killed or frozen under a client).

Each scenario runs in a child process with a time limit, so a crash or a hang is counted, not
fatal. Per scenario: calls tried, clear exceptions (a refusal with a message), silent wrong
values (a result that differs from numpy or from the same work done in one thread), hangs,
crashes, and files lost. A scenario passes with no wrong value, hang, crash or loss.

    python scripts/stress.py            # the full version (a few minutes on 2 cores)
    python scripts/stress.py --quick    # CI's short version

Ends with `N passed, M failed`.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from benchlib import ROOT, loadavg


def _counts(**kw):
    return {"tried": 0, "clear": 0, "wrong": 0, "hang": 0, "crash": 0, "lost": 0, **kw}


def _threads(n, fn):
    errors = []
    barrier = threading.Barrier(n)

    def body(i):
        try:
            barrier.wait()
            fn(i)
        except Exception as e:  # noqa: BLE001 - counted by the scenario
            errors.append(e)
    ts = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


# -- scenarios (run in the child) ---------------------------------------------------------------------------
def eager_threads(scale):
    import ggmlpy as g
    c = _counts()
    ops = {"add": (g.ag_add, np.add), "mul": (g.ag_mul, np.multiply), "matmul": (g.ag_matmul, np.matmul),
           "sigmoid": (lambda a, b: g.ag_sigmoid(a), lambda a, b: 1 / (1 + np.exp(-a)))}
    for n_threads in (2, 4, 8):
        for size in (64, 256):
            reps = max(1, int(scale * (400 if size == 64 else 40) / n_threads))

            def work(i):
                rng = np.random.default_rng(i)
                for _ in range(reps):
                    A = rng.normal(size=(size, size)).astype(np.float32)
                    B = rng.normal(size=(size, size)).astype(np.float32)
                    a, b = g.ag_tensor(A), g.ag_tensor(B)
                    for op, ref in ops.values():
                        c["tried"] += 1
                        if not np.allclose(op(a, b).numpy(), ref(A, B), rtol=1e-4, atol=1e-3 * size):
                            c["wrong"] += 1
                    c["tried"] += 1
                    if not np.array_equal(g.eager_numpy.add(A, B), A + B):
                        c["wrong"] += 1
            c["clear"] += len(_threads(n_threads, work))
    return c


def tapes_threads(scale):
    import ggmlpy as g
    c = _counts()

    def grads(seed):
        rng = np.random.default_rng(seed)
        W = g.ag_param(rng.normal(size=(32, 16)))
        x, y = g.ag_tensor(rng.normal(size=(16, 8))), g.ag_tensor(rng.normal(size=(32, 8)))
        with g.with_grad_tape():
            loss = g.ag_mse_loss(g.ag_tanh(g.ag_matmul(W, x)), y)
        return g.backward(loss)[W].numpy()
    want = {i: grads(i) for i in range(4)}

    def work(i):
        for _ in range(int(30 * scale)):
            c["tried"] += 1
            if not np.allclose(grads(i), want[i], rtol=1e-5, atol=1e-6):
                c["wrong"] += 1
    c["clear"] += len(_threads(4, work))
    return c


def forward_ad_threads(scale):
    import ggmlpy as g
    from ggmlpy.autograd import forward_ad
    c = _counts()

    def work(i):
        x, v = g.ag_tensor(np.full((2, 2), i + 1.0)), g.ag_tensor(np.ones((2, 2)))
        for _ in range(int(50 * scale)):
            c["tried"] += 1
            _, t = g.jvp(lambda a: g.ag_mul(a, a), x, v)
            if not np.allclose(t.numpy(), 2.0 * (i + 1)):
                c["wrong"] += 1
    c["clear"] += len(_threads(4, work))
    c["wrong"] += sum(lv is not None for lv in forward_ad.LEVELS)  # levels left open
    return c


def serve_while_training(scale):
    import ggmlpy as g
    from concurrent.futures import ThreadPoolExecutor
    c = _counts()
    g.manual_seed(0)
    model = g.ag_sequential(g.ag_linear(8, 16, "relu"), g.ag_linear(16, 3))
    served = g.ag_sequential(g.ag_linear(8, 16, "relu"), g.ag_linear(16, 3))
    X = np.random.default_rng(0).normal(size=(8, 64))
    want = served(g.ag_tensor(X)).numpy()
    opt, stop = g.optimizer_adam(model.parameters(), lr=1e-2), threading.Event()

    def train():
        xb, yb = g.ag_tensor(X[:, :16]), g.ag_tensor(np.zeros((3, 16)))
        while not stop.is_set():
            with g.with_grad_tape():
                loss = g.ag_mse_loss(model(xb), yb)
            g.backward(loss)
            opt.step()
            opt.zero_grad()
    t = threading.Thread(target=train)
    t.start()
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: served(g.ag_tensor(X)).numpy(), range(int(400 * scale))))
    stop.set()
    t.join()
    c["tried"] = len(outs)
    c["wrong"] = sum(not np.allclose(o, want, rtol=1e-6, atol=1e-6) for o in outs)
    return c


def fuzz(scale):
    c = _counts()
    for seed in range(int(4 * scale) + 1):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "fuzz_ag.py"), "--calls",
                              str(int(1500 * scale) + 200), "--seed", str(100 + seed)],
                             capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            c["crash"] += 1
            continue
        line = out.stdout.splitlines()[0]  # calls N, refused R, crashes 0, unchecked inputs U
        nums = [int(w.strip(",")) for w in line.split() if w.strip(",").isdigit()]
        c["tried"] += nums[0]
        c["clear"] += nums[1] - nums[3]
        c["wrong"] += nums[3]  # an unchecked input is refused by accident, not by a check
    return c


_SAVER = """
import sys, numpy as np, ggmlpy as g
model = g.ag_sequential(*[g.ag_linear(512, 512) for _ in range(12)])
print("saving", flush=True)
g.ag_save_model(model, sys.argv[1])
"""
_LIMITED = "import resource\nresource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))\n"  # a 1 MB "disk"


def files(scale):
    import ggmlpy as g
    c = _counts()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.gguf")
        g.ag_save_model(g.ag_sequential(g.ag_linear(3, 2)), path)
        good = open(path, "rb").read()
        rng = np.random.default_rng(0)
        for _ in range(int(6 * scale) + 1):  # killed at a random moment of the save
            c["tried"] += 1
            child = subprocess.Popen([sys.executable, "-c", _SAVER, path], stdout=subprocess.PIPE, text=True)
            child.stdout.readline()
            time.sleep(float(rng.uniform(0, 0.3)))
            child.send_signal(signal.SIGKILL)
            child.wait()
            now = open(path, "rb").read()
            if now != good:  # the save may have finished before the kill: then it must load whole
                try:
                    g.ag_load_model(g.ag_sequential(*[g.ag_linear(512, 512) for _ in range(12)]), path)
                    good = now
                except Exception:  # noqa: BLE001
                    c["lost"] += 1
            for f in os.listdir(d):  # a killed save may leave its temporary file: not the target's loss
                if f.endswith(".tmp"):
                    os.unlink(os.path.join(d, f))
        c["tried"] += 1  # a full disk: the file size limit
        # the child limits itself first: a preexec_fn runs Python in the fork of a threaded process
        out = subprocess.run([sys.executable, "-c", _LIMITED + _SAVER, path], capture_output=True, text=True)
        if out.returncode != 0 and "could not write" in out.stderr:
            c["clear"] += 1
        if open(path, "rb").read() != good or any(f.endswith(".tmp") for f in os.listdir(d)):
            c["lost"] += 1
    return c


def long_run(scale):
    """Many one-batch ag_fit calls and random batch sizes: memory must stay bounded."""
    import ggmlpy as g
    c = _counts()

    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(8, 32)), rng.integers(0, 3, 32)
    model = g.ag_sequential(g.ag_linear(8, 16, "relu"), g.ag_linear(16, 3))
    opt = g.optimizer_adam(model.parameters(), 1e-3)
    n = int(1000 * scale) + 50
    for i in range(n):
        if i == n // 4:
            start = rss()
        g.ag_fit(model, g.ag_softmax_cross_entropy_loss, opt, g.ag_dataloader(X, Y, 32, shuffle=False),
                 epochs=1, progress=False)
        xb = g.ag_tensor(rng.normal(size=(8, int(rng.integers(1, 300)))))
        with g.with_grad_tape():
            loss = g.ag_sum(model(xb))
        g.backward(loss)
        c["tried"] += 2
    grown = (rss() - start) / 2**20
    # the graph cache (32 MiB by default) fills with the random shapes; beyond it nothing may grow
    c["wrong"] += grown > 48
    c["growth_mib"] = round(grown, 1)
    return c


# -- the front ends: ONNX, the Keras-like models, Ctrl-C ----------------------------------------------------------
def _onnx_mlp():
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n)
             for n, s in (("W1", (16, 64)), ("b1", (64,)), ("W2", (64, 4)))]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]), helper.make_node("MatMul", ["r", "W2"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4])
    return helper.make_model(helper.make_graph(nodes, "mlp", [x], [y], initializer=inits),
                             opset_imports=[helper.make_opsetid("", 17)])


def onnx_threads(scale):
    """One loaded ONNX model shared by 4 threads, one input shape: every result the serial one."""
    import ggmlpy as g
    c = _counts()
    model = g.onnx_load(_onnx_mlp(), device="cpu")
    xs = [np.random.default_rng(i).normal(size=(8, 16)).astype(np.float32) for i in range(4)]
    want = [g.onnx_run(model, {"x": x})["y"] for x in xs]

    def work(i):
        for k in range(int(100 * scale) + 10):
            c["tried"] += 1
            if not np.array_equal(g.onnx_run(model, {"x": xs[(i + k) % 4]})["y"], want[(i + k) % 4]):
                c["wrong"] += 1
    c["clear"] += len(_threads(4, work))
    return c


def _hostile_models():
    """(name, model, feeds, check(outputs) -> bool) for graphs that aborted or stalled the importer."""
    from onnx import TensorProto, helper, numpy_helper

    def graph(nodes, ins, outs, inits=(), opset=17):
        return helper.make_model(helper.make_graph(nodes, "hostile", ins, outs, initializer=list(inits)),
                                 opset_imports=[helper.make_opsetid("", opset)])

    def vi(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    yield ("Sum of 10 000 inputs", graph([helper.make_node("Sum", ["x"] * 10000, ["y"])], [vi("x", [2, 3])],
                                         [vi("y", [2, 3])]), {"x": x}, lambda o: np.allclose(o["y"], 10000 * x))
    yield ("Concat of 10 000 inputs", graph([helper.make_node("Concat", ["x"] * 10000, ["y"], axis=0)],
                                            [vi("x", [2, 3])], [vi("y", [20000, 3])]), {"x": x},
           lambda o: o["y"].shape == (20000, 3) and np.array_equal(o["y"][-2:], x))
    yield ("Split into 5 000", graph([helper.make_node("Split", ["x"], [f"y{i}" for i in range(5000)], axis=0,
                                                       num_outputs=5000)],
                                     [vi("x", [5000, 3])], [vi(f"y{i}", [1, 3]) for i in range(5000)], opset=18),
           {"x": np.arange(15000, dtype=np.float32).reshape(5000, 3)},
           lambda o: np.array_equal(o["y4999"], [[14997, 14998, 14999]]))
    yield ("a chain of 20 000 nodes", graph([helper.make_node("Neg", [f"h{i}" if i else "x"], [f"h{i + 1}"])
                                             for i in range(20000)], [vi("x", [2, 3])], [vi("h20000", [2, 3])]),
           {"x": x}, lambda o: np.array_equal(o["h20000"], x))
    w = numpy_helper.from_array(np.ones((1, 1, 2, 2), np.float32), "W")
    yield ("Conv of stride 0", graph([helper.make_node("Conv", ["x", "W"], ["y"], strides=[0, 0])],
                                     [vi("x", [1, 1, 4, 4])], [vi("y", [1, 1, 4, 4])], [w]), None, None)
    yield ("opset 1000", graph([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])],
                               opset=1000), None, None)


def onnx_hostile(scale):
    """Graphs that aborted the process (GGML_ASSERT(obj_new)), stalled it (54 s), or raised Python's
    errors: each runs right or is an OnnxError."""
    import ggmlpy as g
    c = _counts()
    for _, proto, feeds, check in _hostile_models():
        c["tried"] += 1
        t = time.perf_counter()
        try:
            model = g.onnx_load(proto, device="cpu")
            c["wrong"] += check is None or not check(g.onnx_run(model, feeds))  # None: must be refused
        except g.OnnxError:
            c["clear"] += 1
        c["hang"] += time.perf_counter() - t > 30
    return c


_BAD_SETTINGS = [("adam", dict(lr=-1)), ("adam", dict(lr=0)), ("adam", dict(lr=float("nan"))),
                 ("adam", dict(lr=float("inf"))), ("adam", dict(lr=1e-50)), ("sgd", dict(lr=-1)),
                 ("adam", dict(beta1=1.5)), ("adam", dict(beta1=1.0)), ("adam", dict(beta2=-0.5)),
                 ("adam", dict(beta2=1.0)), ("adam", dict(eps=-1)), ("adam", dict(eps=0.0)),
                 ("adam", dict(weight_decay=2)), ("sgd", dict(weight_decay=-1)), ("adam", dict(lr="x"))]


def keras_settings(scale):
    """Optimizer settings ggml_opt asserts on (SIGABRT before) or that give NaN weights: refused at
    compile; good settings train to finite weights."""
    import ggmlpy as g
    c = _counts()
    X = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    Y = np.eye(2, dtype=np.float32)[np.random.default_rng(1).integers(0, 2, 64)]
    good = [("adam", dict(lr=1e-2, beta1=0.0, beta2=0.5, eps=1e-6, weight_decay=1.0)), ("sgd", dict(lr=0.1)),
            ("adam", {})]
    for opt, kw in _BAD_SETTINGS + good:
        c["tried"] += 1
        m = g.ggml_layer_dense(g.ggml_model_sequential(), 4, activation="relu", input_shape=(3,))
        m = g.ggml_layer_dense(m, 2, activation="softmax")
        try:
            g.ggml_compile(m, opt, **kw)
            g.ggml_fit(m, X, Y, epochs=2, verbose=0)
        except g.GGMLError:
            c["clear"] += 1
            c["wrong"] += (opt, kw) in good  # a good setting refused
            continue
        finite = all(np.isfinite(w).all() for layer in m.get_weights().values() for w in layer.values())
        c["wrong"] += (opt, kw) in _BAD_SETTINGS or not finite  # accepted: it must have trained
    return c


def nan_frontends(scale):
    """NaN through ReLU in every front end, ggmlpy's kernels on and off: ag_relu, ONNX Relu and a CNN
    (Conv + Relu fused into conv.c), ggml_predict and ggml_fit; relu(-inf) = 0 everywhere."""
    import ggmlpy as g
    from ggmlpy import kernels
    from onnx import TensorProto, helper, numpy_helper
    c = _counts()
    specials = np.array([[np.nan, -np.inf, -2.0, 0.0, 3.0, np.inf]], np.float32)
    want = np.array([[np.nan, 0.0, 0.0, 0.0, 3.0, np.inf]], np.float32)

    def check(ok):
        c["tried"] += 1
        c["wrong"] += not ok
    relu = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])]), opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(0)
    cnn = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("ReduceSum", ["r"], ["y"], keepdims=0)], "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(rng.normal(size=(4, 1, 3, 3)).astype(np.float32), "W"),
                     numpy_helper.from_array(rng.normal(size=(4,)).astype(np.float32), "B")]),
        opset_imports=[helper.make_opsetid("", 17)])
    image = rng.normal(size=(1, 1, 8, 8)).astype(np.float32)
    image[0, 0, 3, 4] = np.nan
    X = rng.normal(size=(32, 3)).astype(np.float32)
    X[0, 1] = np.nan
    Y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 32)]
    before = kernels.enabled()
    try:
        for on in (True, False):
            kernels.set_enabled(on)
            check(np.array_equal(g.ag_relu(g.ag_tensor(specials)).numpy(), want, equal_nan=True))
            check(np.array_equal(g.onnx_run(g.onnx_load(relu, device="cpu"), {"x": specials})["y"], want,
                                 equal_nan=True))
            check(bool(np.isnan(g.onnx_run(g.onnx_load(cnn, device="cpu"), {"x": image})["y"])))
            m = g.ggml_layer_dense(g.ggml_model_sequential(), 8, activation="relu", input_shape=(3,))
            m = g.ggml_compile(g.ggml_layer_dense(m, 3, activation="softmax"), "adam")
            p = g.ggml_predict(m, X[:2])
            check(bool(np.isnan(p[0]).all() and np.isfinite(p[1]).all()))
            g.ggml_fit(m, X, Y, epochs=1, batch_size=32, verbose=0)
            check(bool(np.isnan(m.history.train_loss[0])))
    finally:
        kernels.set_enabled(before)
    return c


def sigint(scale):
    """SIGINT at random moments of ag_compile, backward and checkpointed backward (scripts/sigint_child.py,
    100 each in the full run): always a KeyboardInterrupt, never a crash, usable after."""
    c = _counts()
    n = max(10, int(100 * scale))
    for kind in ("compile", "backward", "checkpoint"):
        c["tried"] += n
        try:
            out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "sigint_child.py"), kind, str(n), "1"],
                                 capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            c["hang"] += 1
            continue
        if out.returncode != 0:
            c["crash"] += 1
            continue
        res = json.loads(out.stdout.strip().splitlines()[-1])
        c["clear"] += res["caught"]
        c["lost"] += res["lost"] + out.stderr.count("Exception ignored")
        c["wrong"] += not res["usable"]
    return c


def rpc_loss(scale):
    """RPC servers killed (SIGKILL) and frozen (SIGSTOP) at random moments of a client's ops or
    dp_train (scripts/rpc_loss_child.py, one loopback server each): the client gets DeviceLostError,
    never a wrong value, an abort or a hang, and dp_train finishes on the CPU replica."""
    from ggmlpy.core import registry, rpc
    c = _counts()
    binary = rpc.rpc_server_binary()
    if "RPC" not in registry.backends() or binary is None:
        return _counts(note="skipped: this libggml has no RPC backend / rpc-server")
    env = {**os.environ, "GGMLPY_RPC_TIMEOUT": "1"}
    rounds = max(1, int(3 * scale))
    for seed in range(rounds):
        for work in ("ops", "dp"):
            for how in ("kill", "freeze"):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", 0))
                    port = sock.getsockname()[1]
                server = subprocess.Popen([str(binary), "--host", "127.0.0.1", "--port", str(port), "--device", "CPU",
                                           "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    for _ in range(200):
                        try:
                            rpc.rpc_probe("127.0.0.1", port, timeout=2)
                            break
                        except Exception:  # noqa: BLE001 - not up yet
                            time.sleep(0.1)
                    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "rpc_loss_child.py"), work,
                                          how, str(port), str(server.pid), str(seed)],
                                         capture_output=True, text=True, timeout=240, env=env)
                except subprocess.TimeoutExpired:
                    c["hang"] += 1
                    continue
                finally:
                    if server.poll() is None:
                        server.send_signal(signal.SIGCONT)
                        server.kill()
                    server.wait(timeout=30)
                if out.returncode != 0:
                    c["crash"] += 1
                    continue
                for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items():
                    c[k] += v
    return c


SCENARIOS = {"threads: eager ops x sizes": eager_threads, "threads: tapes + backward": tapes_threads,
             "threads: forward-AD levels": forward_ad_threads, "threads: serve while training": serve_while_training,
             "fuzz: ag_* API (child processes)": fuzz, "files: killed saves, full disk": files,
             "long run: ag_fit, random shapes": long_run, "threads: one ONNX model": onnx_threads,
             "onnx: hostile graphs": onnx_hostile, "keras: optimizer settings": keras_settings,
             "nan: ReLU in every front end": nan_frontends, "sigint: compile, backward, checkpoint": sigint,
             "rpc: kill and freeze": rpc_loss}


def run_child(name: str, scale: float, timeout: int) -> dict:
    try:
        out = subprocess.run([sys.executable, __file__, "--child", name, "--scale", str(scale)],
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return _counts(hang=1)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [""])[-1]
        return _counts(crash=1, note=f"exit {out.returncode}: {last[:80]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CI's short version")
    ap.add_argument("--scale", type=float, default=None)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    scale = args.scale if args.scale is not None else (0.15 if args.quick else 1.0)
    if args.child:
        print(json.dumps(SCENARIOS[args.child](scale)))
        return 0
    cols = ("tried", "clear", "wrong", "hang", "crash", "lost")
    print(f"{'scenario':36s} " + " ".join(f"{c:>7s}" for c in cols) + "   (clear: exceptions; wrong: silent)")
    passed = failed = 0
    for name in SCENARIOS:
        r = run_child(name, scale, timeout=int(600 * max(scale, 0.5)))
        ok = not (r["wrong"] or r["hang"] or r["crash"] or r["lost"])
        passed, failed = passed + ok, failed + (not ok)
        extra = "" if ok else "  FAIL"
        extra += f"  RSS +{r['growth_mib']} MiB" if "growth_mib" in r else ""
        extra += f"  {r['note']}" if "note" in r else ""
        print(f"{name:36s} " + " ".join(f"{r[c]:7d}" for c in cols) + extra, flush=True)
    print(f"load {loadavg()}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
