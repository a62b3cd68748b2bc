"""The load never changes a result (docs/reproducibility.md): the same inputs, the same seed and the
same set_num_threads give the same bits whether dynamic threads compute a graph on fewer threads
(the machine busy) or on all of them.

The cases (tests/determinism_cases.py: an ag_fit, a compiled step, a Keras-like fit, an ONNX model
shared by four threads, a narrowed ONNX plan) run in child processes: once pinned
(GGMLPY_DYNAMIC_THREADS=0), once with every graph that may shrink shrunk to one thread ("forced",
which this test can count on however quiet the machine), and once with dynamic threads beside a
spinning process. Each also runs with the kernels built for x86-64-v3 (AVX2), where convolutions
and linear layers are OpenBLAS products cut into pieces, rather than AVX-512's own products.
Compared bit for bit: no tolerance.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent


def _cpu_flags() -> set:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


ISAS = [pytest.param("native", id="native"),
        pytest.param("x86-64-v3", id="avx2", marks=pytest.mark.skipif(
            not {"avx2", "fma", "f16c"} <= _cpu_flags(), reason="builds the kernels for AVX2: needs an x86-64-v3 CPU"))]


def _run(tmp_path, isa: str, mode: str) -> tuple:
    out = tmp_path / f"{isa}-{mode}.npz"
    env = dict(os.environ, PYTHONPATH=str(HERE.parent), GGMLPY_KERNELS_ISA=isa)
    env.pop("GGMLPY_DYNAMIC_THREADS", None)
    run = subprocess.run([sys.executable, str(HERE / "determinism_cases.py"), str(out), mode], capture_output=True,
                         text=True, timeout=600, env=env, cwd=HERE.parent)
    assert run.returncode == 0, run.stderr[-3000:]
    fewest, planned = (int(v) for v in run.stdout.split("FEWEST")[-1].split(" of "))
    with np.load(out) as f:
        return {k: f[k] for k in f.files}, fewest, planned


def _differing(a: dict, b: dict) -> list:
    assert a.keys() == b.keys()
    return [f"{k}: {int((a[k].view(np.uint8) != b[k].view(np.uint8)).sum())} bytes" for k in sorted(a)
            if a[k].shape != b[k].shape or a[k].tobytes() != b[k].tobytes()]


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    runs = {}

    def get(isa):
        if isa not in runs:
            runs[isa] = _run(tmp_path_factory.mktemp("pinned"), isa, "pinned")[0]
        return runs[isa]
    return get


@pytest.mark.parametrize("isa", ISAS)
def test_fewer_threads_give_the_pinned_bits(tmp_path, pinned, isa):
    got, fewest, planned = _run(tmp_path, isa, "forced")
    assert fewest == 1 < planned  # the graphs did compute on fewer threads
    assert _differing(pinned(isa), got) == []


@pytest.mark.parametrize("isa", ISAS)
def test_a_busy_process_beside_gives_the_pinned_bits(tmp_path, pinned, isa):
    want = pinned(isa)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        got, fewest, planned = _run(tmp_path, isa, "dynamic")
    finally:
        busy.kill()
        busy.wait()
    assert fewest < planned  # a spinning process leaves fewer cores: dynamic threads took fewer
    assert _differing(want, got) == []
