#!/usr/bin/env python3
"""An RPC server killed (SIGKILL) or frozen (SIGSTOP) at a random moment of a client's work, in this
process: a timer thread signals the server while the client computes on it. Every value the
client reads back must be right (a lost server's replies read as zeros: those must never come
back), the loss must come back as DeviceLostError, later calls must raise at once, and the CPU
must still work. Prints {"tried", "clear", "wrong", "lost"} as JSON; a crash or a hang is the
caller's to count.

    python scripts/rpc_loss_child.py ops|dp kill|freeze PORT SERVER_PID SEED

ops: matrix products on the server, each checked against numpy; dp: dp_train over the CPU and
the server, which must finish on the CPU replica. Run by scripts/stress.py.
"""
import json
import math
import os
import signal
import sys
import threading
import time
import warnings

import numpy as np

import ggmlpy as g

work, how, port, pid, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
spec = f"rpc://127.0.0.1:{port}"
rng = np.random.default_rng(seed)
Lost = getattr(g, "DeviceLostError", g.DeviceError)
c = {"tried": 0, "clear": 0, "wrong": 0, "lost": 0}
timer = threading.Timer(float(rng.uniform(0.05, 1.5)), os.kill, (pid, signal.SIGKILL if how == "kill" else signal.SIGSTOP))


def ops() -> None:
    g.ag_device(spec)
    timer.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        a = rng.normal(size=(48, 48)).astype(np.float32)
        c["tried"] += 1
        try:
            got = g.ag_matmul(g.ag_tensor(a), g.ag_tanh(g.ag_tensor(a))).numpy()
        except Lost:
            c["clear"] += 1
            break
        c["wrong"] += not np.allclose(got, a @ np.tanh(a), rtol=1e-4, atol=1e-3)
    else:
        c["lost"] += 1  # the loss never showed
    for _ in range(3):  # lost for good: at once, every time
        c["tried"] += 1
        t0 = time.monotonic()
        try:
            g.ag_sum(g.ag_tensor(np.ones((2, 2))))
            c["wrong"] += 1
        except Lost:
            c["clear"] += 1
            c["wrong"] += time.monotonic() - t0 > 0.5


def dp() -> None:
    data = [rng.normal(size=(4, 1)) for _ in range(8)]
    timer.start()
    c["tried"] += 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            res = g.dp_train(lambda: g.ag_linear(4, 4), data, loss_fn=lambda o, t: g.ag_mse_loss(o, t), n_iter=2000,
                             lr=1e-2, verbose=False, devices=["cpu", spec])
        except g.DeviceError:
            c["lost"] += 1  # the job, for one lost replica
            return
    dropped = res.dropped
    c["clear"] += len(dropped)
    c["wrong"] += not all(math.isfinite(v) for v in res["loss_history"])
    c["wrong"] += len(dropped) > 1 or any(d["device"] != spec or d["replica"] != 1 for d in dropped)
    c["lost"] += not dropped  # 2000 iterations outlast the timer (at most 1.5 s): the loss must have been seen


(ops if work == "ops" else dp)()
timer.cancel()
g.ag_device("cpu")
c["tried"] += 1
c["wrong"] += float(g.ag_sum(g.ag_tensor(np.ones((3, 3)))).numpy()[0, 0]) != 9.0  # the CPU still works
print(json.dumps(c), flush=True)
