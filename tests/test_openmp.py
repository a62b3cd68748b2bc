"""ggmlpy leaves the calling thread's OpenMP thread count as it found it.

OpenBLAS's OpenMP build keeps its thread count in the calling thread's OpenMP setting, and ggml's BLAS
backend and ggmlpy's kernels set it while they compute. torch's wheel ships a libgomp.so.1 that binds
to the same runtime when OpenBLAS's was loaded first, so a count left behind would be torch's too
(its steps ran 1.45-1.73x slower on one thread instead of two).
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import ctypes, os, sys
import numpy as np
import ggmlpy as g
try:
    gomp = ctypes.CDLL("libgomp.so.1", mode=os.RTLD_NOLOAD)
except OSError:
    print("no-openmp"); sys.exit(0)
before = gomp.omp_get_max_threads()
seen = {}
rng = np.random.default_rng(0)
a = g.ag_tensor(rng.standard_normal((300, 300)).astype(np.float32))
g.ag_matmul(a, a); seen["eager product"] = gomp.omp_get_max_threads()
m = g.onnx_load(os.path.join(sys.argv[1], "tests", "onnx_fixtures", "resnet_block.onnx"), device="cpu")
g.onnx_run(m, {"image": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}); seen["onnx"] = gomp.omp_get_max_threads()
model = g.ag_sequential(g.ag_linear(64, 64, "relu"), g.ag_linear(64, 4))
opt = g.optimizer_adam(model.parameters(), lr=1e-3)
g.ag_fit(model, g.ag_softmax_cross_entropy_loss, opt,
         g.ag_dataloader(rng.standard_normal((64, 256)).astype(np.float32), rng.integers(0, 4, 256), batch_size=64),
         epochs=1, progress=False)
seen["compiled step"] = gomp.omp_get_max_threads()
print(before, seen)
assert all(v == before for v in seen.values()), (before, seen)
print("kept")
"""


def test_the_callers_openmp_thread_count_survives_every_kind_of_computation():
    env = {**os.environ, "OMP_NUM_THREADS": "3", "PYTHONPATH": str(ROOT)}  # 3: not what any graph sets
    r = subprocess.run([sys.executable, "-c", CHILD, str(ROOT)], capture_output=True, text=True, env=env,
                       timeout=600)
    if "no-openmp" in r.stdout:
        pytest.skip("no OpenMP runtime in the process (OpenBLAS's sequential build, or none)")
    assert r.returncode == 0 and "kept" in r.stdout, (r.stdout + r.stderr)[-3000:]
