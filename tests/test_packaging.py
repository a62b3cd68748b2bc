"""The package as a wheel installs it (pyproject.toml, CMakeLists.txt): libggml found in the package's
own lib/ (first: before GGMLPY_LIB_DIR and build_ggml.py's builds), ggmlpy's kernels prebuilt per x86-64
level and taken without a compiler when they were built from these very sources, every kernel source
in the wheel's plan, the CPU variant ggml chose reported with its reason, and OpenBLAS optional at run
time in a build with loadable backends. The installed wheel itself, with compilers hidden, is
scripts/check_wheel.sh's."""
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ggmlpy as g
from ggmlpy import _buildinfo, found, kernels
from ggmlpy.bindings import lib, loader
from ggmlpy.core.backend_modules import cpu_variant, skipped_modules
from ggmlpy.kernels import loader as kernel_loader

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "src" / "ggmlpy" / "kernels"  # the checkout's, which the wheel's build plans from
INSTALLED_KERNELS = Path(kernels.__file__).parent  # the imported package's, whose digests the loader looks up


def build_script():
    spec = importlib.util.spec_from_file_location("build_ggml_for_tests", ROOT / "build_ggml.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_wheel_prebuilds_every_kernel_source_at_every_level():
    sources = {p.name for p in KERNELS.glob("*.c")}
    assert set(_buildinfo.KERNEL_LINKS) == sources
    plan = build_script().kernel_plan(blas=True)
    assert len(plan) == len(sources) * len(_buildinfo.ISA_LEVELS)
    entries = [e.split("|") for e in plan]
    assert {(lvl, Path(src).name) for lvl, src, _ in entries} == {(lvl, s) for lvl in _buildinfo.ISA_LEVELS
                                                                 for s in sources}
    for lvl, src, name in entries:  # named as the runtime looks them up
        assert name == _buildinfo.prebuilt_kernel(Path(src), lvl).name
    no_blas = {Path(e.split("|")[1]).name for e in build_script().kernel_plan(blas=False)}
    assert no_blas == sources - {"gemm.c", "conv.c"}  # the two that link OpenBLAS


def test_a_prebuilt_kernel_is_named_by_its_sources(tmp_path):
    """An edited source (or header) gives another name, so a stale prebuilt library is never loaded."""
    copy = tmp_path / "kernels"
    shutil.copytree(KERNELS, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    before = _buildinfo.prebuilt_kernel(copy / "rows.c", "x86-64-v3")
    assert before == _buildinfo.package_lib_dir() / "kernels" / "x86-64-v3" / before.name
    (copy / "vmath.h").write_text((copy / "vmath.h").read_text() + "\n/* edited */\n")
    assert _buildinfo.prebuilt_kernel(copy / "rows.c", "x86-64-v3").name != before.name
    assert _buildinfo.prebuilt_kernel(copy / "rows.c", "x86-64-v2").name != before.name


@pytest.fixture
def fresh_kernels(monkeypatch):
    """The kernel loader as at a new process's start (nothing loaded yet)."""
    monkeypatch.setattr(kernel_loader, "_state", {})
    monkeypatch.setattr(kernel_loader, "_enabled", [True])


def test_prebuilt_kernels_load_without_a_compiler(fresh_kernels, monkeypatch, tmp_path):
    level = kernel_loader.isa_level()
    if level == "native":
        pytest.skip("no x86-64 level on this CPU: nothing is prebuilt for it")
    cc = kernel_loader._compiler()
    if cc is None:
        pytest.skip("no C compiler here to make the libraries this test installs as prebuilt ones")
    for name, links in _buildinfo.KERNEL_LINKS.items():  # what the wheel's build installs, made here
        try:
            built = kernel_loader._build(cc, INSTALLED_KERNELS / name, links)
        except RuntimeError:
            continue  # gemm.c and conv.c without OpenBLAS: the wheel skips them too
        dest = _buildinfo.prebuilt_kernel(INSTALLED_KERNELS / name, level, tmp_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(built, dest)
    monkeypatch.setattr(kernel_loader, "PREBUILT", tmp_path)
    monkeypatch.setenv("CC", "")
    monkeypatch.setattr(kernel_loader.shutil, "which", lambda name: None)
    monkeypatch.setenv("GGMLPY_CACHE_DIR", str(tmp_path / "cache"))  # a compile would land here
    K = kernels.get()
    assert K is not None and K.path.parent == tmp_path / level
    assert K.rows_lib is not None and K.rnn_lib is not None and K.attention_lib is not None
    assert kernels.origin() == f"prebuilt ({tmp_path / level})" and g.info()["kernels_from"] == kernels.origin()
    assert not (tmp_path / "cache").exists()  # nothing compiled
    # native is this CPU's own build: never prebuilt, so without a compiler there are no kernels
    monkeypatch.setattr(kernel_loader, "_state", {})
    monkeypatch.setenv("GGMLPY_KERNELS_ISA", "native")
    assert kernels.get() is None


def test_the_package_lib_comes_first_and_GGMLPY_LIB_DIR_beside_it_is_warned_about(monkeypatch, tmp_path):
    pkg = tmp_path / "ggmlpy" / "lib"
    pkg.mkdir(parents=True)
    (pkg / "libggml.so").symlink_to(found.lib_dir / "libggml.so")
    monkeypatch.setattr(loader, "package_lib_dir", lambda: pkg)
    monkeypatch.delenv("GGMLPY_LIB_DIR", raising=False)
    hit = loader.find()
    assert (hit.lib_dir, hit.source, hit.bin_dir) == (pkg, "package", pkg)  # rpc-server sits beside the modules
    monkeypatch.setenv("GGMLPY_LIB_DIR", str(found.lib_dir))
    with pytest.warns(RuntimeWarning, match="GGMLPY_LIB_DIR=.* is not used"):
        assert loader.find().source == "package"
    monkeypatch.setattr(loader, "package_lib_dir", lambda: tmp_path / "src" / "ggmlpy" / "lib")  # a source checkout
    assert loader.find().source == "GGMLPY_LIB_DIR"


def test_the_error_names_the_package_lib(monkeypatch, tmp_path):
    monkeypatch.delenv("GGMLPY_LIB_DIR", raising=False)
    monkeypatch.delenv("GGMLPY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setattr(loader, "package_lib_dir", lambda: tmp_path / "site" / "ggmlpy" / "lib")
    monkeypatch.setattr(loader, "environment_record", lambda: tmp_path / "none.json")
    monkeypatch.setattr(loader.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(loader.GGMLLoadError) as e:
        loader.find()
    msg = str(e.value)
    assert "1. the package's own lib/: " + str(tmp_path / "site" / "ggmlpy" / "lib") in msg, msg
    assert "pip install ." in msg


def test_info_says_which_cpu_variant_and_why(capsys):
    data = g.info()
    v = cpu_variant()
    if lib.dl_build:  # one CPU module per x86 level: the one loaded is the best scored on this CPU
        assert v is not None and data["cpu_variant"] == v.name
        assert v.scores[v.name] == max(v.scores.values()) > 0
        assert "highest score" in v.chosen and f"CPU variant  : {v.name}" in capsys.readouterr().out
    else:  # the CPU backend linked into libggml
        assert v is None and data["cpu_variant"] is None and skipped_modules() == {}
        assert "CPU variant  : built in" in capsys.readouterr().out


def test_openblas_is_optional_at_run_time(tmp_path):
    """With OpenBLAS's library made unloadable (a mount namespace binding /dev/null over it), the same
    build imports, skips ggml's BLAS module, turns gemm.c off and computes products and a training
    step on ggml's and ggmlpy's own kernels, matching numpy."""
    if not lib.dl_build:
        pytest.skip("this libggml links its backends in (a build_ggml.py build): OpenBLAS is then a hard "
                    "dependency; the wheel's loadable modules make it optional")
    blas = Path("/usr/lib/x86_64-linux-gnu/libopenblas.so.0")
    if not blas.exists():
        pytest.skip("no OpenBLAS installed: every run here is already without it")
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        pytest.skip("no mount namespaces here (unshare -rm) to hide OpenBLAS in")
    code = """
import numpy as np, ggmlpy as g
from ggmlpy import kernels
data = g.info()
assert "BLAS" not in data["backends"] and "blas" in data["skipped_modules"], data
K = kernels.get()
assert K is not None and K.gemm is None and K.conv_lib is None
rng = np.random.default_rng(0)
a, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((48, 32)).astype(np.float32)
W = g.ag_param(a)
x = g.ag_tensor(b)
with g.with_grad_tape():
    loss = g.ag_mse_loss(g.ag_matmul(W, x), np.zeros((64, 32), np.float32))
loss.backward()
np.testing.assert_allclose(W.grad, 2 * (a @ b) @ b.T / (64 * 32), rtol=1e-4, atol=1e-6)
print("NO-BLAS-OK")
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    r = subprocess.run(["unshare", "-rm", "sh", "-c", 'mount --bind /dev/null "$0" && exec "$@"',
                        str(blas.resolve()), sys.executable, "-c", code],
                       capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert r.returncode == 0 and "NO-BLAS-OK" in r.stdout, r.stderr[-3000:]
