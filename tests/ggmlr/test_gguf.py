"""ggmlR tests/testthat/test-gguf.R: the GGUF reader on a minimal hand-written v3 file."""
import struct

import numpy as np
import pytest

import ggmlpy as g


def create_test_gguf(path):
    """ggmlR's create_test_gguf: one string key, one f32 tensor "w" = 1..4, 32-byte alignment."""
    out = bytearray()
    u32 = lambda v: out.extend(struct.pack("<I", v))  # noqa: E731
    u64 = lambda v: out.extend(struct.pack("<Q", v))  # noqa: E731
    out += b"GGUF"
    u32(3)
    u64(1)
    u64(1)
    u64(8)
    out += b"test.key"
    u32(8)
    u64(5)
    out += b"hello"
    u64(1)
    out += b"w"
    u32(1)
    u64(4)
    u32(0)
    u64(0)
    out += b"\0" * (-len(out) % 32)
    out += struct.pack("<4f", 1.0, 2.0, 3.0, 4.0) + b"\0" * 16
    path.write_bytes(bytes(out))
    return path


@pytest.fixture
def tmp(tmp_path):
    return create_test_gguf(tmp_path / "test.gguf")


def test_gguf_load_opens_a_valid_gguf_file(tmp):
    f = g.gguf_load(tmp)
    assert isinstance(f, g.GGUFFile)  # expect_s3_class(g, "gguf")
    assert f.version == 3
    assert f.n_tensors == 1
    assert f.n_kv >= 1
    g.gguf_free(f)


def test_gguf_load_errors_on_non_existent_file():
    with pytest.raises(g.GGMLError):
        g.gguf_load("/nonexistent/file.gguf")


def test_print_gguf_works(tmp):
    """print.gguf is R's S3 printing; the Python counterpart is repr()."""
    f = g.gguf_load(tmp)
    assert "GGUF file" in repr(f)
    g.gguf_free(f)


def test_gguf_tensor_names_returns_character_vector(tmp):
    f = g.gguf_load(tmp)
    nms = g.gguf_tensor_names(f)
    assert all(isinstance(n, str) for n in nms)
    assert "w" in nms
    g.gguf_free(f)


def test_gguf_tensor_info_returns_shape_and_type(tmp):
    f = g.gguf_load(tmp)
    info = g.gguf_tensor_info(f, "w")
    assert isinstance(info, dict)
    assert info["name"] == "w"
    assert "shape" in info
    g.gguf_free(f)


def test_gguf_tensor_data_returns_numeric_data(tmp):
    f = g.gguf_load(tmp)
    d = g.gguf_tensor_data(f, "w")
    assert d.dtype.kind == "f"  # float32 here, R's double there
    np.testing.assert_allclose(d.ravel(), [1, 2, 3, 4], rtol=1e-5)
    g.gguf_free(f)


def test_gguf_metadata_returns_named_list(tmp):
    f = g.gguf_load(tmp)
    meta = g.gguf_metadata(f)
    assert isinstance(meta, dict)
    assert "test.key" in meta
    assert meta["test.key"] == "hello"
    g.gguf_free(f)


def test_gguf_free_is_safe_to_call_twice(tmp):
    f = g.gguf_load(tmp)
    g.gguf_free(f)
    g.gguf_free(f)
    with pytest.raises(g.GGMLError):  # a freed file refuses reads: its memory map is gone
        g.gguf_metadata(f)


def test_gguf_functions_error_on_non_gguf_objects():
    with pytest.raises(g.GGMLError, match="Expected a gguf object"):
        g.gguf_metadata([])
    with pytest.raises(g.GGMLError, match="Expected a gguf object"):
        g.gguf_tensor_names(42)
    with pytest.raises(g.GGMLError, match="Expected a gguf object"):
        g.gguf_tensor_info("x", "w")
    with pytest.raises(g.GGMLError, match="Expected a gguf object"):
        g.gguf_tensor_data(None, "w")
    with pytest.raises(g.GGMLError, match="Expected a gguf object"):
        g.gguf_free([])


def test_gguf_load_meta_only_reads_header_without_tensor_data(tmp):
    f = g.gguf_load(tmp, meta_only=True)
    assert isinstance(f, g.GGUFFile)
    assert f.meta_only is True
    assert f.version == 3
    assert f.n_tensors == 1
    assert f.n_kv >= 1
    g.gguf_free(f)


def test_metadata_and_tensor_info_are_available_with_meta_only(tmp):
    """ggmlR returns shape NA under meta_only (ggml's gguf API hides ne without allocating
    tensors); ggmlpy parses the tensor table itself and gives the real shape."""
    f = g.gguf_load(tmp, meta_only=True)
    meta = g.gguf_metadata(f)
    assert "test.key" in meta
    assert meta["test.key"] == "hello"
    assert "w" in g.gguf_tensor_names(f)
    info = g.gguf_tensor_info(f, "w")
    assert info["name"] == "w"
    assert info["type"] == "f32"
    assert info["shape"] == [4]
    g.gguf_free(f)


def test_gguf_tensor_data_errors_informatively_under_meta_only(tmp):
    f = g.gguf_load(tmp, meta_only=True)
    with pytest.raises(g.GGMLError, match="meta_only=True, tensor data not available"):
        g.gguf_tensor_data(f, "w")
    with pytest.raises(g.GGMLError, match=r"gguf_load\(path, meta_only=False\)"):
        g.gguf_tensor_data(f, "w")
    g.gguf_free(f)


def test_print_gguf_notes_meta_only_mode(tmp):
    f = g.gguf_load(tmp, meta_only=True)
    assert "meta_only" in repr(f)
    g.gguf_free(f)


def test_default_load_still_returns_tensor_data(tmp):
    f = g.gguf_load(tmp)
    assert not f.meta_only
    np.testing.assert_allclose(g.gguf_tensor_data(f, "w").ravel(), [1, 2, 3, 4], rtol=1e-5)
    g.gguf_free(f)
