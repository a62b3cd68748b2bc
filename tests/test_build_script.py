"""build_ggml.py's output: a short line per stage on the terminal, the full log in the cache, its
tail on failure. (No build runs here: run() is driven with small shell commands.)"""
import importlib.util
import io
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bg(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("build_ggml_under_test", ROOT / "build_ggml.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "LOG", io.StringIO())
    monkeypatch.setattr(mod, "BUILD_LOG", tmp_path / "build.log")
    return mod


def _ninja_script(n, fail=False):
    lines = "".join(f"echo '[{i}/{n}] Building C object ggml-cpu/ops{i}.c.o'; echo 'warning: noise {i}'; "
                    for i in range(1, n + 1))
    return ["sh", "-c", lines + ("echo 'error: the real problem' >&2; exit 3" if fail else "")]


def test_build_output_goes_to_log_and_progress_is_short(bg):
    bg.run(_ninja_script(200), progress=True)
    shown = bg.LOG.getvalue().splitlines()
    assert len(shown) == 10                       # one line per tenth, not 400 lines
    assert shown[-1].endswith("100% (200/200)")
    logged = bg.BUILD_LOG.read_text()
    assert "warning: noise 137" in logged and "[200/200]" in logged


def test_failure_prints_the_logs_tail_and_names_the_log(bg):
    with pytest.raises(bg.BuildError) as e:
        bg.run(_ninja_script(100, fail=True))
    msg = str(e.value)
    assert "error: the real problem" in msg and "failed (3)" in msg
    assert f"full log: {bg.BUILD_LOG}" in msg
    assert "noise 1\n" not in msg                  # only the tail
    assert len(msg.splitlines()) <= bg.TAIL_LINES + 3
    assert bg.LOG.getvalue() == ""                 # no progress asked for, nothing shown


def test_help_documents_auto_blas_and_the_cache(bg, capsys):
    with pytest.raises(SystemExit):
        bg.parse_args(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "plus blas when OpenBLAS is installed" in out
    assert "GGMLPY_CACHE_DIR" in out and "--cache-dir DIR" in out


def test_progress_follows_the_outer_build_through_a_nested_one(bg):
    """The Vulkan backend builds its shader generator as a nested build in the middle of the outer
    one: its "[1/2]" and "[2/2]" once took the progress line to 100 % with 328 steps to go."""
    outer = [f"echo '[{i}/365] Building CXX object ggml-vulkan/op{i}.o'; " for i in range(1, 366)]
    nested = "echo '[1/2] Building CXX object vulkan-shaders-gen.o'; echo '[2/2] Linking vulkan-shaders-gen'; "
    script = "".join(outer[:37]) + nested + "".join(outer[37:])
    bg.run(["sh", "-c", script], progress=True)
    shown = bg.LOG.getvalue().splitlines()
    assert shown[-1].endswith("100% (365/365)")
    assert not any("/2)" in line for line in shown)
    assert [int(re.search(r"(\d+)%", line).group(1)) for line in shown] == list(range(10, 101, 10))


def test_a_virtual_environment_records_the_build_too(bg, tmp_path, monkeypatch):
    """A shell without the build's cache variables finds the build through the environment's record."""
    venv = tmp_path / "venv"
    monkeypatch.setattr(bg._info.sys, "prefix", str(venv))
    monkeypatch.setattr(bg._info.sys, "base_prefix", "/usr")
    info = {"key": "k", "lib_dir": str(tmp_path / "lib")}
    monkeypatch.setattr(bg, "build_or_hit", lambda args, backends, cache: info)
    (tmp_path / "cache").mkdir()
    assert bg.main(["--cache-dir", str(tmp_path / "cache")]) == 0
    import json
    assert json.loads((tmp_path / "cache" / "active.json").read_text()) == info
    assert json.loads((venv / "share" / "ggmlpy" / "active.json").read_text()) == info


def test_a_patch_of_several_parts_gives_its_tag_once(bg):
    rpc = bg.build_key({"rpc"}, native=True)
    assert rpc.count("-rpcp1") == 1 and "-rpcp1" not in bg.build_key({"cpu"}, native=True)
    assert "-vkp1" in bg.build_key({"rpc", "vulkan"}, native=True)


def test_the_rpc_patch_applies_to_the_pinned_sources_once(bg, tmp_path):
    """rpc-fail-soft against the files of the pinned sdist (CI builds from a fresh unpack): every
    part finds its text, and a second run changes nothing."""
    import tarfile
    sdist = next((p for p in (bg.cache_dir() / "sdist" / bg.SDIST_NAME, Path.home() / ".cache/ggmlpy/sdist" / bg.SDIST_NAME)
                  if p.exists()), None)
    if sdist is None:
        pytest.skip("the pinned llama-cpp-python sdist is not in the cache")
    files = sorted({rel for name, _, _, rel, *_ in bg.PATCHES if name == "rpc-fail-soft"})
    with tarfile.open(sdist) as tar:
        for rel in files:
            member = tar.getmember(bg.GGML_PREFIX + rel)
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_bytes(tar.extractfile(member).read())
    bg.VENDOR = tmp_path
    assert bg.apply_patches({"rpc"}) == ["rpc-fail-soft"]
    once = {rel: (tmp_path / rel).read_text() for rel in files}
    assert "GGML_ABORT(\"Failed to connect" not in once["src/ggml-rpc/ggml-rpc.cpp"]
    assert "SO_RCVTIMEO" in once["src/ggml-rpc/transport.cpp"]
    assert bg.apply_patches({"rpc"}) == ["rpc-fail-soft"]
    assert {rel: (tmp_path / rel).read_text() for rel in files} == once
