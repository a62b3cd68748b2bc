"""The bindings' FFI: parsed once into cffi's out-of-line module in the cache, loaded from it at every
later import, parsed again only when the cache is unusable; the loader works with either kind."""
import logging
import os
import subprocess
import sys

import pytest

import ggmlpy
from ggmlpy.bindings import declarations, loader

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GGMLPY_CACHE_DIR", str(tmp_path))
    return tmp_path


def _is_out_of_line(ffi) -> bool:
    return type(ffi).__module__ == "_cffi_backend" and not hasattr(ffi, "cdef")


def test_the_first_load_writes_the_module_and_later_loads_do_not_parse(cache, monkeypatch):
    path = declarations.module_path(declarations.declarations())
    assert path.parent.parent == cache and not path.exists()
    first = declarations.load_ffi()
    assert path.is_file() and _is_out_of_line(first)
    assert list((path.parent / "__pycache__").glob(path.stem + ".*.pyc")), "its byte code is written too"

    def no_parsing(text):
        raise AssertionError("parsed again")
    monkeypatch.setattr(declarations, "parse", no_parsing)
    again = declarations.load_ffi()
    assert _is_out_of_line(again)
    assert again.sizeof("struct ggml_tensor") == loader.TENSOR_SIZE
    assert again.offsetof("struct ggml_tensor", "data") == loader.TENSOR_OFFSETS["data"]


def test_a_changed_declaration_or_cffi_gets_its_own_module():
    text = declarations.declarations()
    assert declarations.module_path(text) != declarations.module_path(text + "int ggmlpy_new(void);")
    assert declarations.module_path(text) == declarations.module_path(text)


def test_an_unwritable_cache_falls_back_to_parsing(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("GGMLPY_CACHE_DIR", str(blocker))
    with caplog.at_level(logging.INFO, logger="ggmlpy.bindings"):
        ffi = declarations.load_ffi()
    assert hasattr(ffi, "cdef"), "the parsed FFI"
    assert ffi.sizeof("struct ggml_tensor") == loader.TENSOR_SIZE
    assert any("cannot cache" in r.getMessage() for r in caplog.records)


def test_a_broken_cached_module_is_parsed_and_replaced(cache, caplog):
    path = declarations.module_path(declarations.declarations())
    path.parent.mkdir(parents=True)
    path.write_text("this is not python (\n")
    with caplog.at_level(logging.WARNING, logger="ggmlpy.bindings"):
        ffi = declarations.load_ffi()
    assert _is_out_of_line(ffi), "rewritten, then loaded"
    assert any("could not load" in r.getMessage() for r in caplog.records)
    assert "not python" not in path.read_text()


@pytest.mark.parametrize("kind", ["out-of-line", "parsed"])
def test_the_loader_checks_and_binds_with_either_ffi(kind, cache, monkeypatch):
    monkeypatch.setenv("GGMLPY_LIB_DIR", str(ggmlpy.found.lib_dir))  # the cache (and its active.json) is a new one
    ffi = declarations.load_ffi() if kind == "out-of-line" else declarations.parse(declarations.declarations())
    assert _is_out_of_line(ffi) == (kind == "out-of-line")
    lib, found = loader.load(ffi)  # version and layout checks included
    assert found.lib_dir == ggmlpy.found.lib_dir
    assert ffi.string(lib.ggml_version()).decode() == ggmlpy.GGML_VERSION
    assert lib.GGML_TYPE_F32 == 0 and callable(lib.ggml_custom_4d)
    # declared (custom_ops.h) but exported by ggmlpy's kernels, not by libggml
    with pytest.raises(AttributeError, match="ggmlpy_gemm_f32"):
        lib.ggmlpy_gemm_f32


def test_a_fresh_import_does_not_parse_declarations():
    """The module ggmlpy's own import made is there: a new process reads it and never loads
    cffi's parser (pycparser)."""
    code = ("import sys, ggmlpy, ggmlpy.bindings as b; "
            "print(type(b.ffi).__module__, 'pycparser' in sys.modules, 'cffi.cparser' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["_cffi_backend", "False", "False"], out.stdout + out.stderr
