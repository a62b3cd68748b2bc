"""The kernels on aarch64, where vmath.h has no vector layer (no NEON paths): every kernel source
compiles with the loader's flags for armv8-a, and the C harnesses of kernels_c/ (GELU, im2col, the
attention, the packed linear layers, which have nothing to check without vector paths; the scalar
kernels that stand in for the pixel-major convolutions and the other kernels there) pass on the
scalar paths under qemu-aarch64. Needs Debian's cross compiler and qemu-user (`apt-get install
qemu-user gcc-aarch64-linux-gnu`); skipped with the reason where they are missing. What an aarch64
machine runs without vector paths is what `python -m ggmlpy info` says there (loader.SCALAR_PATHS).
"""
import shutil
import subprocess
from pathlib import Path

import pytest

from ggmlpy import kernels
from ggmlpy._buildinfo import KERNEL_LINKS, kernel_flags
from ggmlpy.bindings.loader import TENSOR_OFFSETS

HERE = Path(__file__).parent
SOURCES = Path(kernels.__file__).parent
CROSS_CC = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")
SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's cross libraries, which qemu's -L points the loader at
OFFSETS = [f"-DOFF_{k.upper()}={TENSOR_OFFSETS[k]}" for k in ("ne", "nb", "src", "data")]

needs_cross = pytest.mark.skipif(CROSS_CC is None, reason="no aarch64-linux-gnu-gcc (Debian's gcc-aarch64-linux-gnu)")
needs_qemu = pytest.mark.skipif(QEMU is None or not SYSROOT.is_dir(),
                                reason="no qemu-aarch64 (Debian's qemu-user) or no aarch64 sysroot")


@needs_cross
@pytest.mark.parametrize("source", sorted(KERNEL_LINKS))
def test_every_kernel_source_compiles_for_aarch64(source, tmp_path):
    """The flags every build of the kernels passes (kernel_flags: the run-time cache's and the wheel's),
    with -march for armv8-a where they pass an x86-64 level; the OpenBLAS it links is the target's,
    so its symbols are left to the loader."""
    r = subprocess.run([CROSS_CC, *kernel_flags(source, "armv8-a"), "-Werror=implicit",
                        "-o", str(tmp_path / "k.so"), str(SOURCES / source), "-lm"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


@needs_cross
@needs_qemu
@pytest.mark.parametrize("harness", ["gelu_check.c", "im2col_check.c", "attention_check.c", "linear_check.c",
                                     "scalar_check.c"])
def test_the_kernel_harnesses_pass_on_aarch64_under_qemu(harness, tmp_path):
    exe = tmp_path / Path(harness).stem
    r = subprocess.run([CROSS_CC, "-O2", "-march=armv8-a", *OFFSETS, f"-I{SOURCES}", str(HERE / "kernels_c" / harness),
                        "-o", str(exe), "-lm"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([QEMU, "-L", str(SYSROOT), str(exe)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert r.stdout.strip().endswith("0 wrong values"), r.stdout[-3000:]
