"""Reading GGUF files: files written by the gguf package read back exactly, agree with ggml's own
reader, and bad files (handmade and fuzzed) get a GGMLError, never a crash."""
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

import ggmlpy as g  # noqa: E402
from ggmlpy.bindings import ffi, lib  # noqa: E402
from ggmlpy.errors import GGMLError  # noqa: E402
from gguf_builder import (ARRAY, BOOL, F32, F64, I8, I16, I32, I64, STRING, U8, U16, U32, U64,  # noqa: E402
                          build, f32_tensors, kv)

rng = np.random.default_rng(19)
GQ = gguf.GGMLQuantizationType


def write(path, build_fn, arch="test", alignment=None):
    w = gguf.GGUFWriter(os.fspath(path), arch)
    if alignment:
        w.add_custom_alignment(alignment)
    build_fn(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def ggml_reader_view(path):
    """What ggml's own C reader (gguf_init_from_file) sees: keys, data offset, tensor table."""
    params = ffi.new("struct gguf_init_params *", {"no_alloc": True, "ctx": ffi.NULL})
    ctx = lib.gguf_init_from_file(os.fspath(path).encode(), params[0])
    assert ctx != ffi.NULL
    try:
        keys = [ffi.string(lib.gguf_get_key(ctx, i)).decode() for i in range(lib.gguf_get_n_kv(ctx))]
        tensors = [(ffi.string(lib.gguf_get_tensor_name(ctx, i)).decode(), int(lib.gguf_get_tensor_type(ctx, i)),
                    int(lib.gguf_get_tensor_offset(ctx, i)), int(lib.gguf_get_tensor_size(ctx, i)))
                   for i in range(lib.gguf_get_n_tensors(ctx))]
        return keys, int(lib.gguf_get_data_offset(ctx)), int(lib.gguf_get_alignment(ctx)), tensors
    finally:
        lib.gguf_free(ctx)


def assert_agrees_with_ggml_and_gguf(path):
    with g.gguf_load(path) as f:
        keys, data_offset, alignment, tensors = ggml_reader_view(path)
        assert keys == list(g.gguf_metadata(f))
        assert (data_offset, alignment) == (f.data_offset, f.alignment)
        ours = [(i["name"], i["type_id"], i["offset"], i["size_bytes"])
                for i in (g.gguf_tensor_info(f, n) for n in g.gguf_tensor_names(f))]
        assert ours == tensors
        reader = gguf.GGUFReader(path)
        for t in reader.tensors:
            info = g.gguf_tensor_info(f, t.name)
            assert info["file_offset"] == t.data_offset
            assert info["shape"] == [int(d) for d in t.shape]
            raw = g.gguf_tensor_data(f, t.name, raw=True)
            assert np.array_equal(raw.reshape(-1), np.asarray(t.data).reshape(-1).view(np.uint8))


# -- files written by the gguf package ---------------------------------------------------------------
def test_every_metadata_type_reads_back_exactly(tmp_path):
    scalars = [("u8", "add_uint8", 255, "uint8"), ("i8", "add_int8", -128, "int8"),
               ("u16", "add_uint16", 65535, "uint16"), ("i16", "add_int16", -32768, "int16"),
               ("u32", "add_uint32", 2**32 - 1, "uint32"), ("i32", "add_int32", -2**31, "int32"),
               ("f32", "add_float32", 0.1, "float32"), ("u64", "add_uint64", 2**64 - 1, "uint64"),
               ("i64", "add_int64", -2**63, "int64"), ("f64", "add_float64", 0.1, "float64"),
               ("yes", "add_bool", True, "bool"), ("no", "add_bool", False, "bool"),
               ("s", "add_string", "héllo, ✓", "string")]
    arrays = {"a_str": ["x", "", "tok▁en"], "a_int": [1, -2, 3], "a_float": [0.5, -1.25],
              "a_bool": [True, False]}  # the gguf writer skips empty strings and arrays: see the builder test

    def fill(w):
        for key, method, value, _ in scalars:
            getattr(w, method)(key, value)
        for key, value in arrays.items():
            w.add_array(key, value)
        w.add_key_value("a_u8", [1, 2, 255], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT8)
        w.add_key_value("a_f64", [0.1, 1e300], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.FLOAT64)
        w.add_key_value("a_i64", [-2**63, 2**63 - 1], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT64)
    path = write(tmp_path / "meta.gguf", fill)
    with g.gguf_load(path) as f:
        meta = g.gguf_metadata(f, with_types=True)
        assert meta["general.architecture"] == ("string", "test")
        for key, _, value, gtype in scalars:
            assert meta[key][0] == gtype
            if gtype == "float32":
                assert meta[key][1] == np.float32(value)
            else:
                assert meta[key][1] == value and type(meta[key][1]) is type(value), key
        assert meta["a_str"] == ("array[string]", ["x", "", "tok▁en"])
        assert meta["a_int"][0] == "array[int32]" and meta["a_int"][1].tolist() == [1, -2, 3]
        assert meta["a_float"][0] == "array[float32]" and meta["a_float"][1].tolist() == [0.5, -1.25]
        assert meta["a_bool"][0] == "array[bool]" and meta["a_bool"][1].tolist() == [True, False]
        assert meta["a_u8"][0] == "array[uint8]" and meta["a_u8"][1].tolist() == [1, 2, 255]
        assert meta["a_f64"][1].tolist() == [0.1, 1e300]
        assert meta["a_i64"][1].tolist() == [-2**63, 2**63 - 1]
        assert g.gguf_tensor_names(f) == []
    assert_agrees_with_ggml_and_gguf(path)


@pytest.mark.parametrize("alignment", [None, 64, 1, 256])
def test_tensors_of_every_kind_read_back_exactly(tmp_path, alignment):
    x1 = rng.standard_normal(7).astype(np.float32)
    x2 = rng.standard_normal((3, 5)).astype(np.float32)
    x3 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x4 = rng.standard_normal((2, 1, 3, 2)).astype(np.float32)
    h = rng.standard_normal((4, 6)).astype(np.float16)
    bf = rng.standard_normal((2, 8)).astype(np.float32)
    ints = rng.integers(-1000, 1000, (3, 4)).astype(np.int32)
    i8 = rng.integers(-128, 128, 9).astype(np.int8)
    qdata = rng.standard_normal((3, 512)).astype(np.float32)
    quant = {name: g.ggml_quantize_chunk(name, qdata, imatrix=np.ones(512)) for name in
             ("q4_0", "q8_0", "q4_K", "q6_K", "iq2_xxs", "iq4_xs", "mxfp4", "tq2_0")}

    def fill(w):
        for name, arr in (("x1", x1), ("x2", x2), ("x3", x3), ("x4", x4), ("h", h), ("ints", ints), ("i8", i8)):
            w.add_tensor(name, arr)
        w.add_tensor("bf", gguf.quants.quantize(bf, GQ.BF16), raw_dtype=GQ.BF16)
        for name, blocks in quant.items():
            w.add_tensor(f"q.{name}", blocks.reshape(3, -1), raw_dtype=GQ(g.core.types.type_id(name)))
    path = write(tmp_path / "t.gguf", fill, alignment=alignment)
    with g.gguf_load(path) as f:
        assert f.alignment == (alignment or 32)
        for name, arr in (("x1", x1), ("x2", x2), ("x3", x3), ("x4", x4)):
            out = g.gguf_tensor_data(f, name)
            assert out.dtype == np.float32 and out.shape == arr.shape
            assert np.array_equal(out, arr), name
        assert g.gguf_tensor_info(f, "x4")["shape"] == [2, 3, 1, 2]
        assert np.array_equal(g.gguf_tensor_data(f, "h"), h.astype(np.float32))
        assert np.array_equal(g.gguf_tensor_data(f, "bf"), gguf.quants.dequantize(
            gguf.quants.quantize(bf, GQ.BF16), GQ.BF16))
        out = g.gguf_tensor_data(f, "ints")
        assert out.dtype == np.int32 and np.array_equal(out, ints)
        assert np.array_equal(g.gguf_tensor_data(f, "i8"), i8)
        for name, blocks in quant.items():
            info = g.gguf_tensor_info(f, f"q.{name}")
            assert (info["type"], info["shape"], info["size_bytes"]) == (name, [512, 3], blocks.size)
            raw = g.gguf_tensor_data(f, f"q.{name}", raw=True)
            assert raw.shape == (3, blocks.size // 3) and np.array_equal(raw.reshape(-1), blocks)
            values = g.gguf_tensor_data(f, f"q.{name}")
            assert values.shape == (3, 512)
            assert np.array_equal(values.reshape(-1), g.quant.dequantize(name, blocks))
    assert_agrees_with_ggml_and_gguf(path)


def test_llama_cpp_like_file(tmp_path):
    n_vocab, n_embd, n_ff = 300, 256, 512
    tokens = ["<unk>", "<s>", "</s>"] + [f"▁tok{i}" for i in range(n_vocab - 3)]
    weights = {"token_embd.weight": ("q4_K", (n_vocab, n_embd)), "output_norm.weight": ("f32", (n_embd,)),
               "blk.0.attn_norm.weight": ("f32", (n_embd,)), "blk.0.attn_q.weight": ("q4_K", (n_embd, n_embd)),
               "blk.0.attn_k.weight": ("q4_K", (n_embd, n_embd)), "blk.0.attn_v.weight": ("q6_K", (n_embd, n_embd)),
               "blk.0.attn_output.weight": ("q4_K", (n_embd, n_embd)), "blk.0.ffn_gate.weight": ("q4_K", (n_ff, n_embd)),
               "blk.0.ffn_up.weight": ("q4_K", (n_ff, n_embd)), "blk.0.ffn_down.weight": ("q6_K", (n_embd, n_ff)),
               "blk.0.ffn_norm.weight": ("f32", (n_embd,)), "output.weight": ("q8_0", (n_vocab, n_embd))}
    values = {n: rng.standard_normal(shape).astype(np.float32) for n, (_, shape) in weights.items()}

    def fill(w):
        w.add_name("tiny-llama")
        w.add_context_length(2048)
        w.add_embedding_length(n_embd)
        w.add_block_count(1)
        w.add_feed_forward_length(n_ff)
        w.add_head_count(4)
        w.add_head_count_kv(4)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_rope_freq_base(10000.0)
        w.add_file_type(15)
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores([float(-i) for i in range(n_vocab)])
        w.add_token_types([2, 3, 3] + [1] * (n_vocab - 3))
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        for name, (t, _) in weights.items():
            v = values[name]
            if t == "f32":
                w.add_tensor(name, v)
            else:
                w.add_tensor(name, g.ggml_quantize_chunk(t, v.reshape(-1, v.shape[-1])).reshape(v.shape[0], -1),
                             raw_dtype=GQ(g.core.types.type_id(t)))
    path = write(tmp_path / "tiny-llama.gguf", fill, arch="llama")
    with g.gguf_load(path) as f:
        meta = g.gguf_metadata(f)
        assert meta["general.architecture"] == "llama" and meta["general.name"] == "tiny-llama"
        assert meta["llama.block_count"] == 1 and meta["llama.embedding_length"] == n_embd
        assert meta["tokenizer.ggml.tokens"] == tokens
        assert meta["tokenizer.ggml.scores"][5] == -5.0
        assert meta["tokenizer.ggml.token_type"][:4].tolist() == [2, 3, 3, 1]
        assert g.gguf_tensor_names(f) == list(weights)
        for name, (t, shape) in weights.items():
            info = g.gguf_tensor_info(f, name)
            assert info["type"] == t and info["shape"] == list(reversed(shape))
            out = g.gguf_tensor_data(f, name, validate=True)
            assert out.shape == shape
            rel = np.sqrt(np.mean((out - values[name]) ** 2))
            assert rel < {"f32": 1e-9, "q8_0": 0.0062, "q6_K": 0.02, "q4_K": 0.082}[t], name
        with pytest.raises(GGMLError, match="no tensor 'blk.1.attn_q.weight'.*similar"):
            g.gguf_tensor_data(f, "blk.1.attn_q.weight")
    assert_agrees_with_ggml_and_gguf(path)


def test_handle_lifetime_and_meta_only(tmp_path):
    path = tmp_path / "w.gguf"
    path.write_bytes(build([kv("test.key", STRING, "hello")], f32_tensors([("w", np.arange(1, 5, dtype=np.float32))])))
    f = g.gguf_load(path)
    view = g.gguf_tensor_data(f, "w", raw=True)
    data = g.gguf_tensor_data(f, "w")
    g.gguf_free(f)
    g.gguf_free(f)  # twice is fine
    assert view.view(np.float32).tolist() == [1, 2, 3, 4]  # a view keeps the map alive
    assert data.tolist() == [1, 2, 3, 4]
    for call in (g.gguf_tensor_names, g.gguf_metadata, lambda x: g.gguf_tensor_data(x, "w")):
        with pytest.raises(GGMLError, match="freed"):
            call(f)
    with g.gguf_load(path, meta_only=True) as m:
        assert g.gguf_tensor_info(m, "w")["shape"] == [4]
        with pytest.raises(GGMLError, match="meta_only=True"):
            g.gguf_tensor_data(m, "w")
    with pytest.raises(GGMLError, match="Expected a gguf object"):
        g.gguf_metadata({})
    with pytest.raises(GGMLError, match="no such GGUF file"):
        g.gguf_load(tmp_path / "missing.gguf")


def test_empty_strings_and_zero_size_tensors(tmp_path):
    path = tmp_path / "e.gguf"
    path.write_bytes(build([kv("empty", STRING, ""), kv("arr", ARRAY, [], U8)],
                           [("none", [0, 3], 0, 0, b""), ("scalar", [], 0, 0, b"\0\0\x80\x3f")]))
    with g.gguf_load(path) as f:
        assert g.gguf_metadata(f)["empty"] == "" and g.gguf_metadata(f)["arr"].size == 0
        assert g.gguf_tensor_data(f, "none").shape == (3, 0)
        assert g.gguf_tensor_data(f, "scalar").tolist() == 1.0
    assert_agrees_with_ggml_and_gguf(path)


def test_validate_flags_nan_data(tmp_path):
    bad = np.array([1.0, np.nan, 3.0, 4.0], np.float32)
    path = tmp_path / "nan.gguf"
    path.write_bytes(build([], f32_tensors([("w", bad)])))
    with g.gguf_load(path) as f:
        assert np.isnan(g.gguf_tensor_data(f, "w")[1])
        with pytest.raises(GGMLError, match="NaN or infinite"):
            g.gguf_tensor_data(f, "w", validate=True)


# -- bad files --------------------------------------------------------------------------------------
GOOD_KVS = [kv("general.architecture", STRING, "x"), kv("n", U32, 3)]
GOOD_T = f32_tensors([("a", np.ones((2, 8), np.float32)), ("b", np.ones(8, np.float32))])


def tensor(name, ne, t, off, nbytes=None):
    n = int(np.prod(ne)) if ne else 1
    return (name, ne, t, off, b"\1" * (nbytes if nbytes is not None else 4 * n))


BAD_FILES = {
    "wrong magic": (build(GOOD_KVS, GOOD_T, magic=b"GGUG"), "magic"),
    "version 1": (build(GOOD_KVS, GOOD_T, version=1), "GGUFv1"),
    "version 4": (build(GOOD_KVS, GOOD_T, version=4), "version 4"),
    "big endian": (build(GOOD_KVS, GOOD_T, version=3 << 24), "big-endian"),
    "too short": (b"GGUF\3\0\0\0", "shorter than a GGUF header"),
    "huge kv count": (build(GOOD_KVS, GOOD_T, n_kv=2**62), "key-value count"),
    "negative tensor count": (build(GOOD_KVS, GOOD_T, n_tensors=-1), "tensor count"),
    "huge tensor count": (build(GOOD_KVS, GOOD_T, n_tensors=10**9), "tensor count"),
    "extra kv count": (build(GOOD_KVS, GOOD_T, n_kv=3), "not a valid GGUF file"),
    "huge string": (build([struct.pack("<Q", 2**60) + b"k"], [], tail=b"\0" * 64), "truncated"),
    "huge array": (build([b"\1\0\0\0\0\0\0\0k" + struct.pack("<IIQ", ARRAY, U32, 2**61)], []), "claims"),
    "huge string array": (build([b"\1\0\0\0\0\0\0\0k" + struct.pack("<IIQ", ARRAY, STRING, 2**61)], []), "claims"),
    "nested array": (build([b"\1\0\0\0\0\0\0\0k" + struct.pack("<IIQ", ARRAY, ARRAY, 1)], []), "nested"),
    "unknown value type": (build([b"\1\0\0\0\0\0\0\0k" + struct.pack("<I", 13) + b"\0" * 8], []), "unknown value type"),
    "empty key": (build([kv("", U8, 1)], []), "empty"),
    "duplicate key": (build([kv("k", U8, 1), kv("k", U8, 2)], []), "duplicate key"),
    "bad bool": (build([kv("k", U8, 7)[:-5] + struct.pack("<IB", BOOL, 7)], []), "bool"),
    "bad utf-8": (build([kv("k", STRING, b"\xff\xfe")], []), "UTF-8"),
    "alignment not a power of 2": (build([kv("general.alignment", U32, 48)], GOOD_T), "power of 2"),
    "alignment zero": (build([kv("general.alignment", U32, 0)], GOOD_T), "power of 2"),
    "alignment wrong type": (build([kv("general.alignment", U64, 32)], GOOD_T), "must be uint32"),
    "unknown tensor type": (build(GOOD_KVS, [tensor("a", [8], 31, 0)]), "unknown ggml type 31"),
    "tensor type past the enum": (build(GOOD_KVS, [tensor("a", [8], 99, 0)]), "unknown ggml type 99"),
    "five dims": (build(GOOD_KVS, [tensor("a", [1, 1, 1, 1, 1], 0, 0)]), "5 dimensions"),
    "negative dim": (build(GOOD_KVS, [tensor("a", [8, -1], 0, 0, 32)]), "negative dimension"),
    "absurd dims": (build(GOOD_KVS, [tensor("a", [2**40, 2**40], 0, 0, 32)]), "absurd dimensions"),
    "rows not whole blocks": (build(GOOD_KVS, [tensor("a", [48], 2, 0, 36)]), "whole number of blocks"),
    "duplicate tensor name": (build(GOOD_KVS, [tensor("a", [8], 0, 0), tensor("a", [8], 0, 32)]), "duplicate tensor"),
    "tensor name too long": (build(GOOD_KVS, [tensor("n" * 64, [8], 0, 0)]), "longer than"),
    "misaligned offset": (build(GOOD_KVS, [tensor("a", [8], 0, 4)]), "not a multiple of the alignment"),
    "offset past the end": (build(GOOD_KVS, [tensor("a", [8], 0, 0)])[:-1], "runs past the end"),
    "tensor past the end": (build(GOOD_KVS, [tensor("a", [8], 0, 0), ("b", [1024], 0, 64, b"")]), "runs past"),
    "shared offset": (build(GOOD_KVS, [tensor("a", [8], 0, 0), tensor("b", [8], 0, 0)]), "overlap"),
    "overlapping tensors": (build(GOOD_KVS, [tensor("a", [16], 0, 0), tensor("b", [8], 0, 32)]), "overlap"),
    "truncated in the tensor table": (build(GOOD_KVS, GOOD_T)[:120], "truncated"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_files_are_clear_errors(tmp_path, case):
    blob, message = BAD_FILES[case]
    path = tmp_path / "bad.gguf"
    path.write_bytes(blob)
    with pytest.raises(GGMLError, match=message):
        with g.gguf_load(path) as f:
            for name in g.gguf_tensor_names(f):
                g.gguf_tensor_data(f, name)


def test_good_builder_file_is_valid_for_ggml_too(tmp_path):
    """The bad files above differ from this one in one field each, and this one is valid."""
    path = tmp_path / "good.gguf"
    path.write_bytes(build(GOOD_KVS, GOOD_T))
    with g.gguf_load(path) as f:
        assert g.gguf_tensor_data(f, "a").shape == (2, 8)
    assert_agrees_with_ggml_and_gguf(path)
    assert ggml_reader_view(path)[3] == [("a", 0, 0, 64), ("b", 0, 64, 32)]


def test_every_truncation_is_an_error(tmp_path):
    blob = build(GOOD_KVS + [kv("arr", ARRAY, ["ab", "c"], STRING)], GOOD_T)
    path = tmp_path / "cut.gguf"
    for n in range(len(blob) - 1):
        path.write_bytes(blob[:n])
        with pytest.raises(GGMLError):
            g.gguf_load(path).close()


def test_fuzzed_files_never_crash(tmp_path):
    """Random byte flips, truncations and insertions of a llama-like file, in a child process with a
    2 GiB address-space limit: every load either succeeds or raises GGMLError."""
    seed_file = tmp_path / "seed.gguf"
    toks = [f"t{i}" for i in range(40)]
    q = g.ggml_quantize_chunk("q4_K", rng.standard_normal((2, 256)))
    seed_file.write_bytes(build(
        [kv("general.architecture", STRING, "llama"), kv("llama.block_count", U32, 1),
         kv("tokenizer.ggml.tokens", ARRAY, toks, STRING), kv("tokenizer.ggml.scores", ARRAY, [0.5] * 40, F32),
         kv("x.i8", I8, -1), kv("x.u16", U16, 9), kv("x.i16", I16, -9), kv("x.i32", I32, 1), kv("x.u64", U64, 2),
         kv("x.i64", I64, -2), kv("x.f64", F64, 0.25), kv("x.u8", U8, 3), kv("x.b", BOOL, True)],
        [("blk.0.attn_q.weight", [256, 2], 12, 0, q.tobytes())] + [
            (n, ne, t, off + 288, b) for n, ne, t, off, b in f32_tensors([("output_norm.weight", np.ones(8))])]))
    with g.gguf_load(seed_file) as f:
        assert len(g.gguf_tensor_names(f)) == 2
    code = textwrap.dedent(f"""
        import resource, random, sys, numpy as np
        import ggmlpy as g
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        seed = open({os.fspath(seed_file)!r}, "rb").read()
        rnd = random.Random(1234)
        ok = errors = 0
        path = {os.fspath(tmp_path / "fuzz.gguf")!r}
        for i in range(1500):
            b = bytearray(seed)
            for _ in range(rnd.randint(1, 4)):
                r = rnd.random()
                pos = rnd.randrange(len(b))
                if r < 0.6:
                    b[pos] = rnd.randrange(256)
                elif r < 0.75:
                    b[pos:pos + 8] = rnd.randrange(2**64).to_bytes(8, "little")
                elif r < 0.9:
                    del b[pos:]
                else:
                    b[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 9)))
            open(path, "wb").write(b)
            try:
                with g.gguf_load(path) as f:
                    g.gguf_metadata(f)
                    for n in g.gguf_tensor_names(f):
                        g.gguf_tensor_info(f, n)
                        g.gguf_tensor_data(f, n)
                        g.gguf_tensor_data(f, n, raw=True)
                ok += 1
            except g.GGMLError:
                errors += 1
        print("loaded", ok, "rejected", errors)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    loaded, rejected = map(int, res.stdout.split()[1::2])
    assert loaded + rejected == 1500 and loaded > 50 and rejected > 500


# -- ag_load_model uses the same checks ---------------------------------------------------------------
def _resave(src, dst, move=None, share=False):
    """Rewrite an ag_save_model file with the builder: same keys and tensors, offsets edited."""
    with g.gguf_load(src) as f:
        kvs = [kv(k, STRING, v) for k, v in g.gguf_metadata(f).items()]
        tensors = [(n, f.tensors[n].ne, 0, f.tensors[n].offset, bytes(g.gguf_tensor_data(f, n, raw=True)))
                   for n in g.gguf_tensor_names(f)]
    if move:
        n, ne, t, off, b = tensors[1]
        tensors[1] = (n, ne, t, off + move, b)
    if share:
        n, ne, t, off, b = tensors[1]
        tensors[1] = (n, ne, t, tensors[0][3], b)
    dst.write_bytes(build(kvs, tensors))
    return dst


def test_ag_load_model_checks_tensor_offsets(tmp_path):
    model = g.ag_linear(8, 4)
    src = g.ag_save_model(model, tmp_path / "m.gguf")
    g.ag_load_model(g.ag_linear(8, 4), _resave(src, tmp_path / "same.gguf"))  # the rewrite itself is faithful
    with pytest.raises(GGMLError, match="not a multiple of the alignment"):
        g.ag_load_model(g.ag_linear(8, 4), _resave(src, tmp_path / "moved.gguf", move=4))
    with pytest.raises(GGMLError, match="overlap"):
        g.ag_load_model(g.ag_linear(8, 4), _resave(src, tmp_path / "shared.gguf", share=True))
    with pytest.raises(GGMLError, match="not a readable GGUF.*runs past the end"):
        blob = (tmp_path / "same.gguf").read_bytes()
        (tmp_path / "cut.gguf").write_bytes(blob[:-40])
        g.ag_load_model(g.ag_linear(8, 4), tmp_path / "cut.gguf")
