"""Running a test file again on Mesa's lavapipe (software Vulkan), in a child pytest.

ggml-vulkan hides CPU-type Vulkan devices unless GGML_VK_VISIBLE_DEVICES lists them, and reads that
once per process, so a process that started without it cannot see lavapipe: the child starts with
GGMLPY_SOFTWARE_VULKAN=1 and GGML_VK_VISIBLE_DEVICES=0 (tests/test_devices.py does the same)."""
import os
import subprocess
import sys

import pytest

import ggmlpy as g
from ggmlpy.core import registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD_FLAG = "GGMLPY_TEST_LAVAPIPE_CHILD"


def in_child() -> bool:
    return os.environ.get(CHILD_FLAG) == "1"


def has_vulkan() -> bool:
    return any(d.name.startswith("Vulkan") for d in g.devices())


def lavapipe_available() -> bool:
    return "Vulkan" in registry.backends() and any(d.type == "cpu" for d in registry.vulkan_physical_devices())


def rerun_on_lavapipe(test_file: str, timeout: int = 900) -> str:
    """Run `test_file` in a child pytest that sees lavapipe as Vulkan0; skips where it cannot."""
    if in_child():
        pytest.skip("already the lavapipe run")
    if has_vulkan():
        pytest.skip("this process has Vulkan devices: the tests above ran on them")
    if not lavapipe_available():
        pytest.skip("needs the Vulkan backend (python build_ggml.py --backend vulkan) and Mesa's lavapipe "
                    "(apt-get install mesa-vulkan-drivers)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GGMLPY_TEST_"))}
    env.update(GGMLPY_SOFTWARE_VULKAN="1", GGML_VK_VISIBLE_DEVICES="0", **{CHILD_FLAG: "1"})
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rs", test_file],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert " passed" in out, out[-3000:]
    return out
