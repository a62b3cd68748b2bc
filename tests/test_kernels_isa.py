"""The kernels' tests again, in a child process whose kernels are built for a lower x86-64 level.

One source serves every level (vmath.h's vector layer: 16 floats with AVX-512, 8 with AVX2, the
scalar paths below); the tests in KERNEL_TESTS run every kernel at the tail sizes, thread counts and
NaN cases they check, so running them with GGMLPY_KERNELS_ISA=x86-64-v3 checks the AVX2 paths on
an AVX-512 machine. The native build is what the suite itself runs. (x86-64-v2, the scalar paths, is
not run here: there test_onnx_attention's tail sizes miss its 1e-5 tolerance by a few ulp, with the
linear layers over OpenBLAS and no fma.)
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ggmlpy import kernels

ROOT = Path(__file__).resolve().parent.parent
KERNEL_TESTS = ["tests/test_kernels.py", "tests/test_onnx_conv.py", "tests/test_onnx_fastpaths.py",
                "tests/test_onnx_attention.py", "tests/test_onnx_lstm.py", "tests/test_onnx_conv_transpose_exact.py"]


@pytest.mark.parametrize("level", ["x86-64-v3"])
def test_kernel_tests_pass_with_the_kernels_built_for(level):
    if level not in kernels.supported_isa_levels():
        pytest.skip(f"this CPU does not run {level}")
    env = {**os.environ, "GGMLPY_KERNELS_ISA": level}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *KERNEL_TESTS],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    tail = (r.stdout + r.stderr)[-4000:]
    assert r.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail, tail


def test_the_x86_64_v3_build_runs_the_vector_paths():
    """What the run above checks is the AVX2 code: with x86-64-v3 the attention, the LSTM cell, the
    packed products and the pixel-major convolutions take their vector paths."""
    if "x86-64-v3" not in kernels.supported_isa_levels():
        pytest.skip("this CPU does not run x86-64-v3")
    code = ("from ggmlpy import kernels; K = kernels.get(); "
            "print(K.attention_lib.ggmlpy_attention_vector_math(), K.rnn_lib.ggmlpy_rnn_vector_math(), K.packed_rows, "
            "K.conv2d_pixels is None, K.conv2d_pool is None)")
    env = {**os.environ, "GGMLPY_KERNELS_ISA": "x86-64-v3"}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["1", "1", "32", "False", "False"], r.stdout
