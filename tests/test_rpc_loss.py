"""An RPC server that dies (SIGKILL) or freezes (SIGSTOP) costs its device, not the client process.

ggml's RPC client as shipped aborts the process on any failed send or receive and waits in
recv() forever on a silent server; build_ggml.py's rpc-fail-soft patch turns both into a lost
connection that ggmlpy reports as DeviceLostError (a DeviceError), within the RPC timeout. Each
client runs in a child process with a timeout, so an abort or a hang fails the test instead of
taking the suite with it; the child signals the server itself at the moment that matters.
Loopback only. Skips cleanly when the build has no RPC backend or no rpc-server binary.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

import ggmlpy as g
from ggmlpy.core import registry, rpc
from test_rpc import DIE_WITH_PARENT, ROOT, _env, free_port

pytestmark = pytest.mark.skipif(
    "RPC" not in registry.backends() or rpc.rpc_server_binary() is None,
    reason="this libggml has no RPC backend / rpc-server binary (python build_ggml.py --backend vulkan --backend rpc)")

TIMEOUT = 2.0  # the RPC timeout the clients run with (GGMLPY_RPC_TIMEOUT)
SLACK = 6.0    # a loaded 2-core machine: the loss must show within TIMEOUT + SLACK


@pytest.fixture
def servers():
    """start() -> (port, pid) of a new rpc-server on loopback; all of them go at the end."""
    procs = []

    def start():
        port = free_port()
        proc = subprocess.Popen([*DIE_WITH_PARENT, sys.executable, "-m", "ggmlpy", "rpc-server",
                                 "--host", "127.0.0.1", "--port", str(port), "--device", "CPU", "--threads", "1"],
                                cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        for _ in range(300):
            if proc.poll() is not None:
                pytest.fail(f"rpc-server exited with {proc.returncode}")
            try:
                rpc.rpc_probe("127.0.0.1", port, timeout=2)
                return port, proc.pid
            except g.DeviceError:
                import time
                time.sleep(0.2)
        pytest.fail("rpc-server did not answer within 60 s")

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=30)


# The clients use only names main already had (DeviceLostError falls back to DeviceError), so that
# on an unpatched build they fail the way the bug does: an abort or a hang, not a NameError.
PRELUDE = r"""
import json, os, signal, sys, time, warnings
import numpy as np
import ggmlpy as g
Lost = getattr(g, "DeviceLostError", g.DeviceError)

def result(**out):
    print("RESULT " + json.dumps(out), flush=True)
"""

DP_KILL = PRELUDE + r"""
ports, victim = [int(p) for p in sys.argv[1].split(",")], int(sys.argv[2])
devices = ["cpu"] + ["rpc://127.0.0.1:%d" % p for p in ports]
g.manual_seed(0)
rng = np.random.default_rng(0)
data = [rng.normal(size=(2, 1)) for _ in range(8)]
calls = [0]

def forward(model, x):
    calls[0] += 1
    if calls[0] == 3 * len(devices) + 2:  # iteration 4, the first RPC replica: its server dies now
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.5)
    return model.forward(g.ag_tensor(x))

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    res = g.dp_train(lambda: g.ag_linear(2, 2), data, loss_fn=lambda o, t: g.ag_mse_loss(o, t), n_iter=8,
                     lr=1e-2, verbose=False, devices=devices, forward_fn=forward)
after = g.ag_to_device(g.ag_tensor(np.ones((2, 2))), devices[2])  # the other server still works
result(history=[float(v) for v in res["loss_history"]], dropped=getattr(res, "dropped", None), entries=list(res),
       warnings=[str(w.message) for w in caught if "dp_train" in str(w.message)],
       other=float(g.ag_sum(after).numpy()[0, 0]))
"""

DP_KILL_FIRST = PRELUDE + r"""
port, victim = int(sys.argv[1]), int(sys.argv[2])
devices = ["rpc://127.0.0.1:%d" % port, "cpu"]
rng = np.random.default_rng(0)
data = [rng.normal(size=(2, 1)) for _ in range(8)]
calls = [0]

def forward(model, x):
    calls[0] += 1
    if calls[0] == 5:  # iteration 3, replica 0 (which holds the optimizer): its server dies now
        os.kill(victim, signal.SIGKILL)
        time.sleep(0.5)
    return model.forward(g.ag_tensor(x))

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    res = g.dp_train(lambda: g.ag_linear(2, 2), data, loss_fn=lambda o, t: g.ag_mse_loss(o, t), n_iter=6,
                     lr=1e-2, verbose=False, devices=devices, forward_fn=forward)
g.ag_device("cpu")
y = res["model"].forward(g.ag_tensor(np.ones((2, 1)))).numpy()
result(history=[float(v) for v in res["loss_history"]], dropped=[(d["replica"], d["iteration"]) for d in res.dropped],
       warnings=[str(w.message) for w in caught if "dp_train" in str(w.message)],
       model_device=res["model"].parameters()[0].device_name if hasattr(res["model"].parameters()[0], "device_name") else None,
       y=y.tolist())
"""

FREEZE = PRELUDE + r"""
port, victim = int(sys.argv[1]), int(sys.argv[2])
g.ag_device("rpc://127.0.0.1:%d" % port)
x = g.ag_tensor(np.arange(6.0).reshape(2, 3))
first = float(g.ag_sum(x).numpy()[0, 0])
os.kill(victim, signal.SIGSTOP)
t0 = time.monotonic()
try:
    g.ag_sum(g.ag_add(x, x)).numpy()
    err = None
except Lost as e:
    err = (type(e).__name__, str(e))
waited = time.monotonic() - t0
t0 = time.monotonic()
try:
    g.ag_sum(x)
    again = None
except Lost as e:
    again = type(e).__name__
again_s = time.monotonic() - t0
g.ag_device("cpu")
cpu = float(g.ag_sum(g.ag_tensor(np.ones((3, 3)))).numpy()[0, 0])
result(first=first, err=err, waited=waited, again=again, again_s=again_s, cpu=cpu)
"""

DEAD_OP = PRELUDE + r"""
port, victim = int(sys.argv[1]), int(sys.argv[2])
spec = "rpc://127.0.0.1:%d" % port
g.ag_device(spec)
x = g.ag_tensor(np.arange(6.0).reshape(2, 3))
first = float(g.ag_sum(x).numpy()[0, 0])
g.ag_device("cpu")
os.kill(victim, signal.SIGKILL)
time.sleep(0.5)
out = {"first": first}
for what, fn in [("op", lambda: g.ag_mul(x, x)), ("read", lambda: x.numpy()),
                 ("select", lambda: g.ag_device(spec)), ("new", lambda: g.ag_to_device(g.ag_tensor(np.ones((1, 1))), spec))]:
    t0 = time.monotonic()
    try:
        fn()
        out[what] = None
    except Lost as e:
        out[what] = [type(e).__name__, str(e), time.monotonic() - t0]
out["cpu"] = float(g.ag_sum(g.ag_tensor(np.ones((2, 2)))).numpy()[0, 0])
del x
g.release_device(spec)  # frees what ggmlpy holds there; the device stays lost
try:
    g.ag_device(spec)
    out["after_release"] = None
except Lost as e:
    out["after_release"] = type(e).__name__
result(**out)
"""


def run_child(code: str, *args, timeout: float = 120) -> dict:
    env = _env()
    env["GGMLPY_RPC_TIMEOUT"] = str(TIMEOUT)
    try:
        r = subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the client hung (killed after {timeout} s): {(e.stderr or b'')[-2000:]!r}")
    assert r.returncode == 0, f"the client died with {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_a_server_killed_mid_dp_train_costs_its_replica_not_the_job(servers):
    (p1, pid1), (p2, _) = servers(), servers()
    out = run_child(DP_KILL, f"{p1},{p2}", pid1)
    hist = out["history"]
    assert len(hist) == 8 and all(v == v and abs(v) < 1e6 for v in hist)  # finite, all 8 iterations
    assert out["dropped"] == [{"replica": 1, "device": f"rpc://127.0.0.1:{p1}", "iteration": 4,
                               "error": out["dropped"][0]["error"]}]
    assert "DeviceLost" in out["dropped"][0]["error"] or f"127.0.0.1:{p1}" in out["dropped"][0]["error"]
    assert len(out["warnings"]) == 1 and f"rpc://127.0.0.1:{p1}" in out["warnings"][0]
    assert "iteration 4" in out["warnings"][0] and "2 replica(s)" in out["warnings"][0]
    assert out["other"] == 4.0 and out["entries"] == ["params", "loss_history", "model"]  # ggmlR's


def test_losing_the_replica_that_holds_the_optimizer_hands_over_to_the_next(servers):
    port, pid = servers()
    out = run_child(DP_KILL_FIRST, port, pid)
    assert len(out["history"]) == 6 and all(v == v for v in out["history"])
    assert out["dropped"] == [[0, 3]]
    assert len(out["warnings"]) == 2 and "replica 0" in out["warnings"][0]
    assert "replica 1 on cpu holds the weights from iteration 3" in out["warnings"][1]
    assert out["model_device"] in (None, "CPU") and all(v == v for row in out["y"] for v in row)


def test_a_frozen_server_is_a_device_error_within_the_timeout(servers):
    port, pid = servers()
    out = run_child(FREEZE, port, pid)
    assert out["first"] == 15.0
    assert out["err"] is not None and out["err"][0] == "DeviceLostError", out
    assert "did not answer within 2 s" in out["err"][1] and f"127.0.0.1:{port}" in out["err"][1]
    assert TIMEOUT * 0.8 <= out["waited"] <= TIMEOUT + SLACK, out["waited"]
    assert out["again"] == "DeviceLostError" and out["again_s"] < 0.5  # lost for good: at once
    assert out["cpu"] == 9.0


def test_an_op_on_a_dead_rpc_device_raises_at_once(servers):
    port, pid = servers()
    out = run_child(DEAD_OP, port, pid)
    assert out["first"] == 15.0
    for what in ("op", "read", "select", "new"):
        assert out[what] is not None and out[what][0] == "DeviceLostError", (what, out[what])
        assert f"127.0.0.1:{port}" in out[what][1]
    assert "died" in out["op"][1] or "closed" in out["op"][1]
    assert max(out[w][2] for w in ("read", "select", "new")) < 0.5
    assert out["cpu"] == 4.0 and out["after_release"] == "DeviceLostError"


def test_set_rpc_timeout_checks_its_value_and_returns_the_previous():
    old = g.set_rpc_timeout(7)
    try:
        assert g.set_rpc_timeout(3.5) == 7.0 and rpc.rpc_timeout() == 3.5
        for bad in (0, -1, float("nan"), float("inf"), "soon"):
            with pytest.raises(g.DeviceError, match="set_rpc_timeout"):
                g.set_rpc_timeout(bad)
        assert rpc.rpc_timeout() == 3.5
    finally:
        g.set_rpc_timeout(None)
    assert rpc.rpc_timeout() == float(os.environ.get("GGMLPY_RPC_TIMEOUT", "5")) and old == rpc.rpc_timeout()


def test_this_build_survives_a_lost_server():
    assert rpc.rpc_fail_soft(), ("this libggml's RPC client aborts on a lost server: rebuild it with "
                               "build_ggml.py (its rpc-fail-soft patch)")
