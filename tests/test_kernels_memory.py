"""The kernels' buffer arithmetic under AddressSanitizer, at every x86-64 level this CPU runs, and
the level the kernels are built for.

conv.c's im2col_block once wrote a block spanning more than 64 output rows at twice its offset:
stale patches (wrong convolutions, no error) and writes past the patch buffer. The harness in
kernels_c/ runs it against a tap-by-tap reference with the buffer allocated to exactly its
callers' size, so an out-of-bounds write fails even where the values read back look right.
"""
import io
import shutil
import subprocess
from pathlib import Path

import pytest

import ggmlpy
from ggmlpy import kernels
from ggmlpy.bindings.loader import TENSOR_OFFSETS
from ggmlpy.kernels import loader

HERE = Path(__file__).parent
SOURCES = Path(kernels.__file__).parent
CC = shutil.which("cc") or shutil.which("gcc")


def asan_build(harness: str, level: str, out: Path) -> Path:
    offsets = [f"-DOFF_{k.upper()}={TENSOR_OFFSETS[k]}" for k in ("ne", "nb", "src", "data")]
    exe = out / f"{Path(harness).stem}-{level}"
    r = subprocess.run([CC, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                        "-fno-omit-frame-pointer", f"-march={level}", *offsets, f"-I{SOURCES}",
                        str(HERE / "kernels_c" / harness), "-o", str(exe), "-lm"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and "sanitize" in r.stderr:
        pytest.skip(f"no AddressSanitizer runtime: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr
    return exe


@pytest.mark.skipif(CC is None, reason="no C compiler")
@pytest.mark.parametrize("level", list(kernels.ISA_LEVELS))
def test_im2col_blocks_of_any_number_of_rows_are_right_and_in_bounds(level, tmp_path):
    if level not in kernels.supported_isa_levels():
        pytest.skip(f"this CPU does not run {level}")
    exe = asan_build("im2col_check.c", level, tmp_path)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert r.stdout.strip().endswith("0 wrong values")


@pytest.mark.skipif(CC is None, reason="no C compiler")
@pytest.mark.parametrize("level", list(kernels.ISA_LEVELS))
@pytest.mark.parametrize("harness", ["linear_check.c", "attention_check.c", "gelu_check.c", "scalar_check.c",
                                     "conv_transpose_check.c"])
def test_vector_tails_are_right_and_in_bounds(harness, level, tmp_path):
    """The tails of vmath.h's vectors (masked loads and stores, partial register blocks) in the packed
    linear layers, the attention, GELU and ConvTranspose, against float64 (ConvTranspose: against its
    order of sums, to the bit) at every level: the AVX-512 build's 16 floats, the AVX2 build's 8, the
    scalar paths."""
    if level not in kernels.supported_isa_levels():
        pytest.skip(f"this CPU does not run {level}")
    exe = asan_build(harness, level, tmp_path)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert r.stdout.strip().endswith("0 wrong values")


def test_an_unknown_isa_level_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("GGMLPY_KERNELS_ISA", "x86-64-v9")
    with pytest.raises(ValueError, match="GGMLPY_KERNELS_ISA='x86-64-v9': expected 'native' or one of"):
        kernels.isa_level()


def test_a_level_this_cpu_lacks_is_refused_before_anything_is_built(monkeypatch):
    monkeypatch.setattr(loader, "_cpu_flags", lambda: {"sse4_2"})  # a CPU below x86-64-v2
    monkeypatch.setenv("GGMLPY_KERNELS_ISA", "x86-64-v3")
    with pytest.raises(ValueError, match="this CPU does not run it"):
        kernels.isa_level()
    monkeypatch.setenv("GGMLPY_KERNELS_ISA", "native")
    assert kernels.isa_level() == "native"


def test_the_default_level_is_the_best_this_cpu_runs(monkeypatch):
    monkeypatch.delenv("GGMLPY_KERNELS_ISA", raising=False)
    levels = kernels.supported_isa_levels()
    assert kernels.isa_level() == (levels[-1] if levels else "native")
    avx2 = set().union(*(kernels.ISA_LEVELS[n] for n in ("x86-64-v2", "x86-64-v3")))
    monkeypatch.setattr(loader, "_cpu_flags", lambda: avx2)  # Zen 3, Intel's client cores
    assert kernels.isa_level() == "x86-64-v3"
    assert kernels.isa_summary() == ("x86-64-v3 (the best level this CPU runs; GGMLPY_KERNELS_ISA=native builds "
                                     "for this CPU alone): AVX2 paths")
    monkeypatch.setattr(loader, "_cpu_flags", lambda: set())  # off x86-64
    assert kernels.isa_level() == "native"
    assert kernels.isa_summary() == ("native (no x86-64 level applies to this CPU): scalar paths (no vector "
                                     "kernels: convolutions and linear layers use OpenBLAS's products)")
    monkeypatch.setattr(loader, "_cpu_flags", lambda: avx2)
    monkeypatch.setenv("GGMLPY_KERNELS_ISA", "x86-64-v2")
    assert kernels.isa_summary() == f"x86-64-v2 (GGMLPY_KERNELS_ISA=x86-64-v2): {loader.SCALAR_PATHS}"


def test_info_says_which_level_the_kernels_are_built_for(monkeypatch):
    monkeypatch.setenv("GGMLPY_KERNELS_ISA", "native")
    out = io.StringIO()
    data = ggmlpy.info(file=out)
    assert data["kernels_isa"].startswith("native (GGMLPY_KERNELS_ISA=native): ")
    assert f"CPU kernels  : {data['kernels_isa']}" in out.getvalue()
