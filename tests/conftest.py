"""Shared test setup.

* The ggmlpy under test is the installed one (a wheel, or an editable install of this checkout),
  as every child process a test starts imports it too. Where none is installed, this checkout's
  src/ is put on sys.path and PYTHONPATH, so tests and their children import the same package.
* `--devices cpu,vulkan` (or GGMLPY_TEST_DEVICES) selects the devices that tests taking a
  `device` argument run on. "vulkan" includes software Vulkan (Mesa's lavapipe): ggml reads
  that switch once per process, so it is set here, before ggmlpy is first imported.
  Devices that are not available are skipped, with the reason.
"""
import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if importlib.util.find_spec("ggmlpy") is None:
    SRC = os.path.join(ROOT, "src")
    sys.path.insert(0, SRC)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))

# Per-device tolerance for results compared with float64 references: Vulkan kernels
# accumulate some products in f16 (measured on lavapipe: ~2e-4 relative), and ggml's CUDA
# backend runs f32 products through cuBLAS in TF32 (a 10-bit mantissa, like f16).
GPU_TOLERANCE = {"rtol": 5e-3, "atol": 5e-4}
TOLERANCE = {"cpu": {"rtol": 1e-5, "atol": 1e-6}, "vulkan": GPU_TOLERANCE, "cuda": GPU_TOLERANCE}


def pytest_addoption(parser):
    parser.addoption("--devices", default=os.environ.get("GGMLPY_TEST_DEVICES", "cpu"),
                     help="comma-separated devices for device-parametrised tests: cpu, vulkan, cuda")


def _selected(config) -> list:
    return [d.strip().lower() for d in config.getoption("--devices").split(",") if d.strip()]


def pytest_configure(config):
    if "vulkan" in _selected(config):
        os.environ.setdefault("GGMLPY_SOFTWARE_VULKAN", "1")


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", _selected(metafunc.config), indirect=True)


@pytest.fixture
def device(request):
    """Select the device for the test's tensors and ops; yields its kind ("cpu", "vulkan", "cuda")."""
    import ggmlpy as g
    kind = request.param
    if kind not in TOLERANCE:
        pytest.skip(f"unknown test device {kind!r}")
    if kind != "cpu" and not any(d.backend.lower() == kind for d in g.devices()):
        pytest.skip(f"no {kind} device here (see python -m ggmlpy info)")
    previous = g.ag_device()
    g.ag_device(kind)
    try:
        yield kind
    finally:
        g.ag_device(previous)


@pytest.fixture
def tol(device):
    return TOLERANCE[device]
