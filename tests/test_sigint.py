"""Ctrl-C is never lost and never a crash: a SIGINT always reaches the user as KeyboardInterrupt,
even when it arrives inside a finalizer or half-way through a release, and the library works
afterwards. Before ggmlpy's handler (ggmlpy._sigint), 2 of 24 SIGINTs during a backward were
swallowed by Storage.__del__ ("Exception ignored"), and some interrupted _Chunk.free between its
two frees: the next free freed the buffer again (a segfault in 1 run of 3 of the test below).
Each test runs in a child process, so a crash is a failed test."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


# The child: `work` in a loop until a SIGINT, sent by a timer thread at a random moment of it;
# every SIGINT must come back as a KeyboardInterrupt within a few seconds, and at the end the
# gradients must equal those computed before any interrupt.
_RANDOM_SIGINTS = """
import json, os, signal, sys, threading, time
import numpy as np
import ggmlpy as g

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
"""


@pytest.mark.parametrize("kind", ["backward", "checkpoint", "compile"])
def test_sigint_at_random_moments_is_always_a_keyboard_interrupt(kind):
    out = run_child(_RANDOM_SIGINTS.replace("sys.argv[1], int(sys.argv[2])", f"{kind!r}, 100")
                    .replace("int(sys.argv[3])", "1"), timeout=600)
    assert out.returncode == 0, f"the child died ({out.returncode}): {out.stderr[-2000:]}"
    assert "Exception ignored" not in out.stderr, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res == {"caught": 100, "lost": 0, "usable": True}, res


def test_an_interrupt_inside_marked_code_is_raised_once_it_returned():
    out = run_child("""
        import os, signal
        import ggmlpy
        from ggmlpy._sigint import uninterruptible
        done = []

        @uninterruptible
        def release():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100000):  # many points where Python would run the handler
                pass
            done.append(1)

        class Held:
            def __del__(self):
                release()
        try:
            Held()  # the finalizer runs at once; its interrupt must not be swallowed
            for _ in range(1000):
                len("x")
            print("lost")
        except KeyboardInterrupt:
            print("raised after", len(done))
    """)
    assert out.returncode == 0 and out.stdout.strip() == "raised after 1", out.stdout + out.stderr[-1500:]
    assert "Exception ignored" not in out.stderr


def test_a_handler_of_the_users_own_is_left_alone():
    out = run_child("""
        import signal
        def mine(signum, frame):
            pass
        signal.signal(signal.SIGINT, mine)
        import ggmlpy
        print(signal.getsignal(signal.SIGINT) is mine, ggmlpy._sigint.installed())
    """)
    assert out.stdout.split() == ["True", "False"], out.stdout + out.stderr[-1500:]
