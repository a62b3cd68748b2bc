"""Devices: every available device computes what the CPU backend computes.

On each non-CPU device this process sees (Vulkan, CUDA) a few ag ops with their gradients and
a few SGD and Adam steps of a small MLP are compared with the CPU backend; ag_to_device round
trips; mixing devices in one op raises DeviceError; asking for a missing device says which are
there and how to build the missing backend.

Tolerance: Vulkan converts f32 matmul inputs to f16 in some kernels (lavapipe included), so
results agree with the CPU to about 1e-4..1e-3 relative to the largest magnitude (measured on
lavapipe: ops 2e-4, three SGD/Adam steps 5e-4), not to float32 rounding; the checks allow 5e-3.
CUDA: the same allowance, for ggml's own small-batch product kernels (at most 16 columns, rows a
multiple of 32), which use TF32 tensor cores; cuBLAS products are kept f32 (see loader.py).

Software Vulkan (Mesa lavapipe): ggml hides it unless GGML_VK_VISIBLE_DEVICES lists it, and only
reads that once per process, so when this process has no Vulkan device but the build has the
Vulkan backend and the system has lavapipe, `test_vulkan_lavapipe_in_child` re-runs the device
tests of this file in a child pytest with GGMLPY_SOFTWARE_VULKAN=1. CUDA tests skip without a GPU.
"""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.core import ggml_log, registry
from ggmlpy.bindings import ffi, lib
from device_cases import mlp_case

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = os.environ.get("GGMLPY_TEST_DEVICES_CHILD") == "1"
LOCAL = [d.name for d in g.devices() if d.backend in ("CPU", "Vulkan", "CUDA")]
OTHERS = [n for n in LOCAL if n != "CPU"]
BUILT = registry.backends()
REL_TOL = {"Vulkan": 5e-3, "CUDA": 5e-3, "CPU": 1e-6}


def rel_err(ref, got) -> float:
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    return float(np.max(np.abs(ref - got)) / max(float(np.max(np.abs(ref))), 1e-12))


def tol(dev: str) -> float:
    return next(v for k, v in REL_TOL.items() if dev.startswith(k))


def on(dev: str, fn):
    g.ag_device(dev)
    try:
        return fn()
    finally:
        g.ag_device("cpu")


@pytest.fixture(autouse=True)
def back_to_cpu():
    yield
    g.ag_device("cpu")


# -- the computations compared --------------------------------------------------------------------
def ops_case():
    rng = np.random.default_rng(0)
    # 32-deep matmul with 24 columns: Vulkan takes its f16-input kernel here (about 1e-3 relative)
    w, x, b = rng.normal(size=(16, 32)) / 6, rng.normal(size=(32, 24)), rng.normal(size=(16, 1))
    t = rng.uniform(size=(16, 24))
    W, X, B, T = g.ag_param(w), g.ag_tensor(x), g.ag_param(b), g.ag_tensor(t)
    with g.with_grad_tape():
        z = g.ag_add(g.ag_matmul(W, X), B)
        h = g.ag_mul(g.ag_relu(z), g.ag_sigmoid(z)) + g.ag_tanh(z)
        p = g.ag_softmax(h)
        loss = g.ag_add(g.ag_mse_loss(p, T), g.ag_mean(g.ag_sqrt(g.ag_add(g.ag_mul(h, h), 1.0))))
    grads = g.backward(loss)
    return {"z": z.numpy(), "h": h.numpy(), "p": p.numpy(), "loss": loss.numpy(),
            "dW": grads[W].numpy(), "db": grads[B].numpy()}


# -- every device against the CPU -------------------------------------------------------------------
def test_devices_listed():
    devs = g.devices()
    assert any(d.name == "CPU" and d.type == "cpu" for d in devs)
    for d in devs:
        assert d.name and d.backend and d.type in ("cpu", "gpu", "igpu", "accel", "other")
    assert "CPU" in BUILT


@pytest.mark.parametrize("dev", OTHERS)
def test_ops_match_cpu(dev):
    ref = on("cpu", ops_case)
    got = on(dev, ops_case)
    for k in ref:
        assert rel_err(ref[k], got[k]) <= tol(dev), f"{k} on {dev}: rel err {rel_err(ref[k], got[k]):.2e}"


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
@pytest.mark.parametrize("dev", OTHERS)
def test_mlp_training_matches_cpu(dev, opt_name):
    l_ref, p_ref = on("cpu", lambda: mlp_case(opt_name))
    l_got, p_got = on(dev, lambda: mlp_case(opt_name))
    assert l_got[-1] < l_got[0]  # it trains
    assert rel_err(l_ref, l_got) <= tol(dev), (l_ref, l_got)
    for i, (a, b) in enumerate(zip(p_ref, p_got)):
        assert rel_err(a, b) <= tol(dev), f"param {i} on {dev}: rel err {rel_err(a, b):.2e}"


@pytest.mark.parametrize("dev", LOCAL)
def test_to_device_round_trip(dev):
    a = np.random.default_rng(2).normal(size=(9, 4))
    x = g.ag_tensor(a)
    assert x.device == "cpu" and x.device_name == "CPU"
    y = g.ag_to_device(x, dev)
    assert y.device_name == dev and y.shape == x.shape
    assert (y is x) == (dev == "CPU")  # as ggmlR: already there, the same tensor
    z = g.ag_to_device(y, "cpu")
    assert z.device == "cpu" and z.device_name == "CPU"
    np.testing.assert_array_equal(z.numpy(), x.numpy())  # copies are exact
    ids = g.ag_to_device(g.ag_tensor(np.arange(6).reshape(2, 3), dtype="i32"), dev)
    assert ids.dtype == "i32"
    np.testing.assert_array_equal(ids.numpy(), np.arange(6).reshape(2, 3))


@pytest.mark.parametrize("dev", OTHERS)
def test_mixing_devices_raises(dev):
    x = g.ag_tensor(np.ones((3, 3)))
    y = g.ag_to_device(x, dev)
    with pytest.raises(g.DeviceError, match="different devices"):
        g.ag_add(x, y)
    with pytest.raises(g.DeviceError, match="ag_to_device"):
        g.ag_matmul(y, x)


def test_unavailable_devices_say_what_is_there_and_how_to_build():
    for spec, kind in (("cuda:7", "cuda"), ("vulkan:9", "vulkan"), ("tpu", None)):
        with pytest.raises(g.DeviceError) as e:
            g.ag_device(spec)
        msg = str(e.value)
        assert "available devices:" in msg and "CPU" in msg, msg
        if kind == "cuda" and "CUDA" not in BUILT:
            assert "python build_ggml.py --backend cuda" in msg, msg
        if kind == "vulkan" and "Vulkan" not in BUILT:
            assert "python build_ggml.py --backend vulkan" in msg, msg
        if kind == "vulkan" and "Vulkan" in BUILT and not any(n.startswith("Vulkan") for n in LOCAL):
            assert "GGMLPY_SOFTWARE_VULKAN=1" in msg, msg
    with pytest.raises(g.DeviceError, match="cuda:<index>"):
        g.ag_device("cuda:first")
    assert g.ag_device() == "cpu" and g.ag_device_name() == "CPU"  # a failed switch leaves the device as it was


def test_gpu_spec_prefers_hardware():
    local_gpus = [d for d in g.devices() if d.type in ("gpu", "igpu") and d.backend in ("Vulkan", "CUDA")]
    if not local_gpus:  # as ggmlR: "gpu" falls back to the CPU, with a warning
        with pytest.warns(RuntimeWarning, match="no GPU"):
            assert g.ag_device("gpu") == "cpu"  # the previous setting
        assert g.ag_default_device() == "gpu" and g.ag_device_name() == "CPU"
        g.ag_device("cpu")
        return
    g.ag_device("gpu")
    name = g.ag_device_name()
    hardware = [d.name for d in local_gpus if not registry.is_software_device(d.name)]
    assert name == (hardware[0] if hardware else local_gpus[0].name) or name in hardware


def test_rpc_endpoint_errors_do_not_abort():
    with pytest.raises(g.DeviceError, match="rpc://host:port"):
        g.ag_device("rpc://no-port-here")
    with socket.socket() as s:  # a free port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(g.DeviceError) as e:
        g.ag_device(f"rpc://127.0.0.1:{port}")
    if "RPC" in BUILT:
        assert "could not reach" in str(e.value) and "rpc-server" in str(e.value)
    else:
        assert "python build_ggml.py" in str(e.value)


# -- CUDA: runs on a machine with an NVIDIA GPU and a --backend cuda build, skips elsewhere --------
def test_cuda_device():
    if "CUDA" not in BUILT:
        pytest.skip("this libggml has no CUDA backend (python build_ggml.py --backend cuda)")
    cuda = [n for n in LOCAL if n.startswith("CUDA")]
    if not cuda:
        pytest.skip("the CUDA backend is built but sees no GPU")
    g.ag_device("cuda")
    assert g.ag_device_name() == "CUDA0" and g.ag_device("cuda:0") == "cuda" and g.ag_device_name() == "CUDA0"
    ref, got = on("cpu", ops_case), on("cuda", ops_case)
    assert all(rel_err(ref[k], got[k]) <= tol("CUDA") for k in ref)


def test_cuda_f32_products_are_f32_not_tf32():
    """cuBLAS products stay f32 (NVIDIA_TF32_OVERRIDE=0, set at import): TF32 would be ~1e-3 off."""
    if not any(n.startswith("CUDA") for n in LOCAL):
        pytest.skip("no CUDA device (python build_ggml.py --backend cuda, on a machine with an NVIDIA GPU)")
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(64, 48)), rng.normal(size=(48, 40))  # 40 columns: cuBLAS, not ggml's mmf
    got = on("cuda", lambda: g.ag_matmul(g.ag_tensor(a), g.ag_tensor(b)).numpy())
    assert rel_err(a @ b, got) < 1e-5


def test_an_asynchronous_device_syncs_before_the_host_reads_or_writes(monkeypatch):
    """CUDA queues ops (Executor(asynchronous=True)); here the CPU device plays it: ggml's CPU
    backend computes at once either way, so only the bookkeeping is under test."""
    x = g.ag_tensor(np.ones((3, 4)))
    ex = x.device_context.executor
    monkeypatch.setattr(ex, "asynchronous", True)  # its graphs are then computed with ggml_backend_graph_compute_async
    from ggmlpy.runtime import executor as E
    waits = []

    class Lib:  # counts the waits the executor asks ggml for
        def __getattr__(self, name):
            return getattr(lib, name)

        def ggml_backend_synchronize(self, ptr):
            waits.append(ptr)
            lib.ggml_backend_synchronize(ptr)
    monkeypatch.setattr(E, "lib", Lib())
    y = g.ag_add(x, x)
    assert ex.pending and not waits
    np.testing.assert_array_equal(y.numpy(), 2.0)  # a read waits for the queue ...
    assert len(waits) == 1 and not ex.pending
    y.numpy()  # ... once
    assert len(waits) == 1
    g.ag_add(x, x)
    x.data = np.zeros((3, 4))  # a write into memory a queued op may read waits too
    assert len(waits) == 2 and not ex.pending


_TF32_ENV = "import os, ggmlpy; print(os.environ.get('NVIDIA_TF32_OVERRIDE'))"


@pytest.mark.parametrize("env,expected", [({}, "0"), ({"GGMLPY_CUDA_TF32": "1"}, "None"),
                                          ({"NVIDIA_TF32_OVERRIDE": "1"}, "1")])
def test_cuda_tf32_is_off_unless_asked_for(env, expected):
    base = {k: v for k, v in os.environ.items() if k not in ("NVIDIA_TF32_OVERRIDE", "GGMLPY_CUDA_TF32")}
    out = subprocess.run([sys.executable, "-c", _TF32_ENV], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env=dict(base, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]), **env))
    assert out.returncode == 0 and out.stdout.split()[-1] == expected, out.stdout + out.stderr


# -- software Vulkan and ggml's log ---------------------------------------------------------------------
def _lavapipe_available() -> bool:
    return "Vulkan" in BUILT and any(d.type == "cpu" for d in registry.vulkan_physical_devices())


def test_enable_software_vulkan_too_late_or_in_effect():
    if not registry._has_backend_library("vulkan"):
        with pytest.raises(g.DeviceError, match="no Vulkan backend"):
            registry.enable_software_vulkan()
        return
    if os.environ.get("GGML_VK_VISIBLE_DEVICES") is None and registry._registry["vk_env"] is None:
        with pytest.raises(g.DeviceError, match="too late"):
            registry.enable_software_vulkan()  # this process has long since listed its devices
    else:
        assert registry.enable_software_vulkan() == os.environ["GGML_VK_VISIBLE_DEVICES"]


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GGML_VK_VISIBLE_DEVICES", "GGMLPY_SOFTWARE_VULKAN", "GGMLPY_TEST_DEVICES_CHILD")}
    env.update(extra)
    return env


@pytest.mark.skipif(CHILD, reason="runs in the parent only")
def test_enable_software_vulkan_right_after_import():
    if not _lavapipe_available():
        pytest.skip("needs the Vulkan backend and a CPU-type Vulkan device (apt-get install mesa-vulkan-drivers)")
    code = ("import ggmlpy\nfrom ggmlpy.core.registry import enable_software_vulkan, software_vulkan_enabled\n"
            "v = enable_software_vulkan()\nassert software_vulkan_enabled()\n"
            "print('VISIBLE', v, [d.name for d in ggmlpy.devices()])\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_clean_env(), capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Vulkan0" in r.stdout, r.stdout


@pytest.mark.skipif(CHILD, reason="runs in the parent only")
def test_vulkan_lavapipe_in_child():
    """This file's device tests on Mesa's lavapipe, in a child with GGMLPY_SOFTWARE_VULKAN=1."""
    if any(n.startswith("Vulkan") for n in LOCAL):
        pytest.skip("this process already has Vulkan devices: the parametrized tests above covered them")
    if not _lavapipe_available():
        pytest.skip("needs the Vulkan backend (python build_ggml.py --backend vulkan --backend rpc) and "
                    "Mesa's lavapipe (apt-get install mesa-vulkan-drivers)")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-k", "Vulkan0",
           os.path.join(ROOT, "tests", "test_devices.py")]
    r = subprocess.run(cmd, cwd=ROOT, env=_clean_env(GGMLPY_SOFTWARE_VULKAN="1", GGMLPY_TEST_DEVICES_CHILD="1"),
                       capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    print(out[-3000:])
    assert r.returncode == 0, out[-6000:]  # 5 would mean no Vulkan0 test ran
    assert " passed" in out, out[-3000:]


def test_ggml_log_goes_to_python_logging(caplog):
    cb, ud = ffi.new("ggml_log_callback *"), ffi.new("void **")
    lib.ggml_log_get(cb, ud)
    assert ffi.cast("uintptr_t", cb[0]) == ffi.cast("uintptr_t", ggml_log._LOG_CALLBACK)
    assert logging.getLogger("ggmlpy.ggml").getEffectiveLevel() <= logging.WARNING
    with caplog.at_level(logging.INFO, logger="ggmlpy.ggml"):
        cb[0](lib.GGML_LOG_LEVEL_WARN, b"ggmlpy test: part one, ", ffi.NULL)
        cb[0](lib.GGML_LOG_LEVEL_CONT, b"part two\n", ffi.NULL)
        cb[0](lib.GGML_LOG_LEVEL_DEBUG, b"ggmlpy test: debug is below INFO\n", ffi.NULL)
        assert lib.ggml_backend_load(b"/nonexistent/libggml-nothing.so") == ffi.NULL  # ggml logs an ERROR
    recs = [r for r in caplog.records if r.name == "ggmlpy.ggml"]
    msgs = [(r.levelno, r.getMessage()) for r in recs]
    assert (logging.WARNING, "ggmlpy test: part one, part two") in msgs, msgs
    assert not any("debug is below" in m for _, m in msgs)
    assert any(lvl == logging.ERROR and "failed to load /nonexistent/libggml-nothing.so" in m for lvl, m in msgs), msgs
