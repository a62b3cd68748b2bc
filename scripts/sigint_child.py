#!/usr/bin/env python3
"""SIGINT at random moments of one kind of work, in this process: `work` runs in a loop until a
timer thread sends SIGINT at a random moment of it; every SIGINT must come back as a
KeyboardInterrupt within a few seconds, and at the end the gradients must equal those computed
before any interrupt. Prints {"caught", "lost", "usable"} as JSON; a crash is the exit status.

    python scripts/sigint_child.py compile|backward|checkpoint N SEED

Run by tests/test_sigint.py and scripts/stress.py (each in a child process).
"""
import json
import os
import signal
import sys
import threading
import time

import numpy as np

# SIGINT at Python's default before ggmlpy is imported, as in an interactive session: a runner started
# in the background (`nohup ... &`) passes SIGINT on ignored, and Python then raises no KeyboardInterrupt
signal.signal(signal.SIGINT, signal.default_int_handler)
import ggmlpy as g  # noqa: E402

kind, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(int(sys.argv[3]))
g.manual_seed(0)
layers = [g.ag_linear(64, 128, "relu")] + [g.ag_linear(128, 128, "relu") for _ in range(8)] + [g.ag_linear(128, 4)]
model = g.ag_sequential(*layers)
X, Y = g.ag_tensor(np.random.default_rng(0).normal(size=(64, 32))), g.ag_tensor(np.zeros((4, 32)))


def loss_of(x, y):
    return g.ag_mse_loss(model(x), y)


def backward():
    with g.with_grad_tape():
        loss = loss_of(X, Y)
    g.backward(loss)


def checkpointed():
    with g.with_grad_tape():
        h = X
        for layer in layers:
            h = g.ag_checkpoint(layer, h)
        loss = g.ag_mse_loss(h, Y)
    g.backward(loss)


def compiled():
    g.ag_compile(loss_of, [X, Y], optimizer=None)(X, Y)


def gradient():
    with g.with_grad_tape():
        loss = loss_of(X, Y)
    return g.backward(loss)[layers[0].W].numpy()


work = {"backward": backward, "checkpoint": checkpointed, "compile": compiled}[kind]
want = gradient()
t0 = time.perf_counter()
work()
T = time.perf_counter() - t0
caught = lost = 0
for _ in range(n):
    delay = float(rng.uniform(0, 2 * T))
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    deadline = time.monotonic() + delay + 3.0
    try:
        timer.start()
        while time.monotonic() < deadline:
            work()
        lost += 1  # the SIGINT never came back
    except KeyboardInterrupt:
        caught += 1
    timer.join()
usable = bool(np.array_equal(gradient(), want))
work()
print(json.dumps({"caught": caught, "lost": lost, "usable": usable}))
