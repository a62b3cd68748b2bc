"""ggml RPC: `python -m ggmlpy rpc-server` serves this machine's CPU; a client trains on it.

The server is ggml's own rpc-server binary from the same build, started through the
`rpc-server` subcommand on a free loopback port and killed at the end. The client runs in a
child process: an RPC device, once added, is listed (as a "gpu") by every later devices() call
of that process, which other tests must not see, and a build without build_ggml.py's
rpc-fail-soft patch aborts the whole process if its server goes away (test_rpc_loss.py covers
servers that die or freeze). Everything has a
timeout. Skips cleanly when the build has no RPC backend or no rpc-server binary.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.core import registry, rpc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(
    "RPC" not in registry.backends() or rpc.rpc_server_binary() is None,
    reason="this libggml has no RPC backend / rpc-server binary (python build_ggml.py --backend vulkan --backend rpc)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Linux: the server gets SIGTERM if pytest dies without cleaning up. setpriv sets that in the child
# before it execs the server; a preexec_fn would run Python (and dlopen libc) in the fork of a threaded
# pytest process, where only async-signal-safe calls are allowed until exec.
DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "TERM"] if shutil.which("setpriv") else []


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("GGML_VK_VISIBLE_DEVICES", "GGMLPY_SOFTWARE_VULKAN")}
    return env


@pytest.fixture(scope="module")
def server():
    port = free_port()
    proc = subprocess.Popen([*DIE_WITH_PARENT, sys.executable, "-m", "ggmlpy", "rpc-server",
                             "--host", "127.0.0.1", "--port", str(port), "--device", "CPU", "--threads", "2"],
                            cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"rpc-server exited with {proc.returncode}: {proc.stdout.read().decode()[-2000:]}")
            try:
                rpc.rpc_probe("127.0.0.1", port, timeout=2)  # ggml's HELLO handshake, then hang up
                break
            except g.DeviceError:
                if time.monotonic() > deadline:
                    pytest.fail("rpc-server did not answer within 60 s")
                time.sleep(0.2)
        yield port, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


CLIENT = r"""
import json, sys
import numpy as np
import ggmlpy as g
from ggmlpy.runtime.state import release_device

endpoint = sys.argv[1]

sys.path.insert(0, "tests")
from device_cases import mlp_case


def mlp(opt_name, steps=4):
    losses, params = mlp_case(opt_name, steps)
    return losses, [p.tolist() for p in params]

out = {}
for opt_name in ("sgd", "adam"):
    g.ag_device("cpu")
    out["cpu_" + opt_name] = mlp(opt_name)
    g.ag_device("rpc://" + endpoint)
    out["device"] = g.ag_device_name()
    out["rpc_" + opt_name] = mlp(opt_name)
    g.ag_device("cpu")
info = [d for d in g.devices() if d.description == endpoint]
out["listed"] = [(d.name, d.backend, d.memory_total) for d in info]
x = g.ag_tensor(np.arange(12.0).reshape(3, 4))
y = g.ag_to_device(x, "rpc://" + endpoint)
out["round_trip"] = g.ag_to_device(y, "cpu").numpy().tolist()


def dp(devices):  # data-parallel training, one replica per listed device
    g.manual_seed(0)
    rng = np.random.default_rng(0)
    data = [rng.normal(size=(2, 1)) for _ in range(8)]
    res = g.dp_train(lambda: g.ag_linear(2, 2), data, loss_fn=lambda o, t: g.ag_mse_loss(o, t), n_iter=6,
                     lr=1e-2, verbose=False, devices=devices)
    return [float(v) for v in np.ravel(res["loss_history"])]


out["dp_cpu"] = dp(["cpu", "cpu"])
out["dp_rpc"] = dp(["cpu", "rpc://" + endpoint])
try:
    g.ag_add(x, y)
    out["mixing"] = "no error"
except g.DeviceError as e:
    out["mixing"] = str(e)
del x, y
with g.with_grad_tape():  # the tape holds the last step's tensors, some on the server
    pass
release_device("rpc://" + endpoint)  # free every buffer on the server before it goes away
print("RESULT " + json.dumps(out), flush=True)
"""


def run_client(port: int, timeout: float = 300) -> dict:
    r = subprocess.run([sys.executable, "-c", CLIENT, f"127.0.0.1:{port}"], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"client exited with {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(a))), 1e-12))


def test_rpc_training_matches_cpu(server):
    port, proc = server
    out = run_client(port)
    assert out["device"].startswith("RPC")
    assert out["listed"] and out["listed"][0][1] == "RPC" and out["listed"][0][2] == 0  # memory not asked
    for opt_name in ("sgd", "adam"):
        l_cpu, p_cpu = out["cpu_" + opt_name]
        l_rpc, p_rpc = out["rpc_" + opt_name]
        assert l_rpc[-1] < l_rpc[0]
        # the server computes with the same CPU kernels: equal up to float32 rounding and thread order
        assert rel_err(l_cpu, l_rpc) < 1e-5, (l_cpu, l_rpc)
        for a, b in zip(p_cpu, p_rpc):
            assert rel_err(a, b) < 1e-5
    np.testing.assert_array_equal(out["round_trip"], np.arange(12.0).reshape(3, 4))
    assert rel_err(out["dp_cpu"], out["dp_rpc"]) < 1e-5  # dp_train with a replica on the server
    assert "different devices" in out["mixing"]
    assert proc.poll() is None, "the server must survive its client"


def test_rpc_server_serves_a_second_client(server):
    port, proc = server
    out = run_client(port)
    assert out["device"].startswith("RPC")
    assert proc.poll() is None


def test_rpc_busy_or_missing_server_raises_not_aborts(server):
    port, _ = server
    # ggml's rpc-server serves one client at a time: hold a connection, and a second client
    # must get a DeviceError after its timeout instead of hanging (or ggml aborting).
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        time.sleep(0.2)
        with pytest.raises(g.DeviceError, match="did not answer"):
            rpc.rpc_probe("127.0.0.1", port, timeout=1.0)
    rpc.rpc_probe("127.0.0.1", port, timeout=5)  # free again once that client hangs up
    with pytest.raises(g.DeviceError, match="could not reach"):
        rpc.rpc_probe("127.0.0.1", free_port(), timeout=2)


def test_rpc_server_subcommand_refuses_without_binary(tmp_path):
    # a libggml folder without ../bin/rpc-server: a clear message, exit status 1
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    for f in g.found.lib_dir.iterdir():
        if f.name.startswith("libggml"):
            (lib_dir / f.name).symlink_to(f)
    env = _env()
    # this checkout's source, which has no lib/ of its own: an installed package would load its own
    env.update(GGMLPY_LIB_DIR=str(lib_dir), PYTHONPATH=os.path.join(ROOT, "src"))
    r = subprocess.run([sys.executable, "-m", "ggmlpy", "rpc-server", "--port", "1"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "no rpc-server binary" in r.stderr and "build_ggml.py" in r.stderr


def test_rpc_server_warns_off_loopback(tmp_path):
    # the warning is printed before exec; an unknown --device makes ggml's server exit before binding
    r = subprocess.run([sys.executable, "-m", "ggmlpy", "rpc-server", "--host", "0.0.0.0", "--port", str(free_port()),
                        "--device", "NoSuchDevice0"], cwd=ROOT, env=_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    assert "no authentication" in r.stderr and "loopback" in r.stderr
    assert "unknown device" in r.stdout + r.stderr
