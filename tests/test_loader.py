"""Where libggml is found: the build's records (the cache's, and the virtual environment's, so a
shell without the build's cache variables finds it again), and an error that lists every place
searched and the variables that move them."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from ggmlpy import found
from ggmlpy.bindings import loader

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """A source checkout (no lib/ in the package), no GGMLPY_LIB_DIR, an empty cache, no environment
    record and no llama-cpp-python."""
    monkeypatch.setattr(loader, "package_lib_dir", lambda: tmp_path / "src" / "ggmlpy" / "lib")
    monkeypatch.delenv("GGMLPY_LIB_DIR", raising=False)
    monkeypatch.delenv("GGMLPY_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "elsewhere"))
    record = tmp_path / "venv" / "share" / "ggmlpy" / "active.json"
    monkeypatch.setattr(loader, "environment_record", lambda: record)
    monkeypatch.setattr(loader.importlib.util, "find_spec", lambda name: None)
    return record


def _this_build() -> dict:
    return {"lib_dir": str(found.lib_dir), "bin_dir": str(found.bin_dir) if found.bin_dir else None,
            "native": False, "cpu": None}


def test_the_environment_record_finds_the_build_whatever_the_cache_variables(nowhere):
    nowhere.parent.mkdir(parents=True)
    nowhere.write_text(json.dumps(_this_build()))
    hit = loader.find()
    assert hit.lib_dir == found.lib_dir and "environment" in hit.source


def test_the_error_lists_every_place_searched_and_the_variables(nowhere, tmp_path):
    with pytest.raises(loader.GGMLLoadError) as e:
        loader.find()
    msg = str(e.value)
    for expected in ("$GGMLPY_LIB_DIR: not set", str(tmp_path / "elsewhere" / "ggmlpy" / "active.json"),
                     "GGMLPY_CACHE_DIR", "XDG_CACHE_HOME", str(nowhere), "llama-cpp-python", "not installed",
                     "python build_ggml.py"):
        assert expected in msg, (expected, msg)


def test_the_error_says_why_a_record_was_not_used(nowhere, tmp_path):
    nowhere.parent.mkdir(parents=True)
    nowhere.write_text(json.dumps({"lib_dir": str(tmp_path / "gone"), "native": False}))
    with pytest.raises(loader.GGMLLoadError, match=f"names {tmp_path / 'gone'}, which holds no libggml"):
        loader.find()
    nowhere.write_text(json.dumps({"lib_dir": str(found.lib_dir), "native": True, "cpu": "x86_64-0000000000"}))
    with pytest.raises(loader.GGMLLoadError, match="a build for another CPU"):
        loader.find()


def test_a_fresh_shell_imports_through_the_environment_record(tmp_path):
    """End to end: a virtual environment whose record names this build, used from a shell with
    another HOME and no cache variables, imports ggmlpy; without the record it fails listing
    every place searched."""
    import site
    import venv
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GGMLPY_", "XDG_"))}
    # this environment's packages (numpy, cffi, ...) and this checkout's source (no lib/ of its own), on
    # the new one's path
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=os.pathsep.join([str(ROOT / "src")] + site.getsitepackages()))
    code = "import ggmlpy; print('FOUND', ggmlpy.found.source)"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode != 0 and "Searched, in order" in out.stderr, out.stderr[-2000:]
    record = env_dir / "share" / "ggmlpy" / "active.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps(_this_build()))
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0 and "FOUND build_ggml.py (this environment's record)" in out.stdout, out.stderr[-2000:]
