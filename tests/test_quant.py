"""Quantization through ggml's kernels, checked against the gguf package's numpy implementations."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import quants as gq  # noqa: E402

import ggmlpy as g  # noqa: E402
from ggmlpy import quant as q  # noqa: E402
from ggmlpy.errors import GGMLError  # noqa: E402

# every type both ggml (this pin) and the gguf package can quantize, and those gguf can only decode
GGUF_QUANTIZES = sorted(g.ggml_type_name(int(c.qtype)) for c in gq._type_traits.values()
                        if "quantize_blocks" in c.__dict__ and c.qtype.name != "BF16")
GGUF_DEQUANTIZES = sorted(g.ggml_type_name(int(c.qtype)) for c in gq._type_traits.values()
                          if "dequantize_blocks" in c.__dict__ and c.qtype.name != "BF16")
CHUNK_TYPES = sorted(n.removeprefix("quantize_") for n in q.__all__
                     if n.startswith("quantize_") and not n.startswith("quantize_row_"))

# Relative RMSE bound on N(0, 1) data (8 rows of 4096, seeds 0-2 measured, bound about 15 % above):
# the table in docs/gguf-quant.md. ggml_quantize_chunk without importance weights, or with unit weights where required.
GAUSS_RMSE = {
    "q8_0": 0.0062, "q8_K": 0.008, "q6_K": 0.020, "q5_K": 0.042, "q5_1": 0.044, "q5_0": 0.049,
    "q4_K": 0.082, "q4_1": 0.090, "q4_0": 0.099, "iq4_nl": 0.088, "iq4_xs": 0.088, "nvfp4": 0.109,
    "mxfp4": 0.132, "q3_K": 0.175, "iq3_s": 0.191, "iq3_xxs": 0.245, "iq2_s": 0.305, "q2_K": 0.340,
    "iq2_xs": 0.345, "iq2_xxs": 0.395, "iq1_s": 0.56, "iq1_m": 0.67, "q1_0": 0.69, "q2_0": 0.83,
    "tq1_0": 0.93, "tq2_0": 0.93,
}


def _gtype(name):
    return gguf.GGMLQuantizationType(g.core.types.type_id(name))


def _edge_cases():
    rng = np.random.default_rng(7)
    gauss = rng.standard_normal((4, 512)).astype(np.float32)
    return {
        "gauss": gauss,
        "uniform": rng.uniform(-1, 1, (2, 512)).astype(np.float32),
        "zeros": np.zeros((2, 512), np.float32),
        "constant": np.full((2, 512), 0.37, np.float32),
        "negative constant": np.full((2, 512), -3.0, np.float32),
        "one spike": np.eye(2, 512, 17, dtype=np.float32) * 5,
        "huge": gauss[:2] * np.float32(1e30),
        "beyond f16": gauss[:2] * np.float32(1e6),
        "tiny": gauss[:2] * np.float32(1e-30),
        "subnormal": gauss[:2] * np.float32(1e-40),
        "mixed scales": np.where(rng.random((2, 512)) < 0.5, 1e4, 1e-4).astype(np.float32) * gauss[:2],
    }


def test_type_constants_and_sizes_match_gguf_package():
    for t in gguf.GGMLQuantizationType:
        name = f"GGML_TYPE_{t.name}"
        assert getattr(g, name) == int(t), name
        info = g.ggml_quant_block_info(int(t))
        if t.name == "Q8_1":  # gguf 0.19 still lists the old block (two f32); ggml's has two f16 and 32 int8
            assert (info["block_size"], info["type_size"]) == (32, 2 + 2 + 32)
            continue
        assert (info["block_size"], info["type_size"]) == gguf.GGML_QUANT_SIZES[t], t.name
        assert g.ggml_blck_size(t.name.lower()) == info["block_size"]
    assert g.ggml_type_sizef(g.GGML_TYPE_Q4_0) == 18 / 32
    assert g.ggml_row_size(g.GGML_TYPE_Q4_K, 512) == 288
    from ggmlpy.bindings import lib
    assert g.ggml_ftype_to_ggml_type(lib.GGML_FTYPE_MOSTLY_Q4_K) == g.GGML_TYPE_Q4_K


@pytest.mark.parametrize("name", GGUF_QUANTIZES)
def test_quantize_bit_for_bit_with_gguf(name):
    for case, x in _edge_cases().items():
        with np.errstate(all="ignore"):
            expected = gq.quantize(x, _gtype(name)).ravel()
        assert np.array_equal(q.ggml_quantize_chunk(name, x), expected), case
        assert np.array_equal(getattr(q, f"quantize_row_{name}_ref")(x), expected), case
        assert np.array_equal(getattr(q, f"quantize_{name}")(x, *x.shape), expected), case


@pytest.mark.parametrize("name", GGUF_DEQUANTIZES)
def test_dequantize_bit_for_bit_with_gguf(name):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 1024)).astype(np.float32)
    w = rng.random(1024).astype(np.float32) + 0.1
    blocks = q.ggml_quantize_chunk(name, x, imatrix=w)
    ours = q.dequantize(name, blocks)
    theirs = gq.dequantize(blocks.reshape(4, -1), _gtype(name)).ravel()
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    # arbitrary bytes (NaN and infinite scales included): the same values, NaN where gguf has NaN
    size = gguf.GGML_QUANT_SIZES[_gtype(name)][1]
    raw = rng.integers(0, 256, 16 * size, dtype=np.uint8)
    with np.errstate(all="ignore"):
        theirs = gq.dequantize(raw.reshape(1, -1), _gtype(name)).ravel()
    assert np.array_equal(getattr(q, f"dequantize_row_{name}")(raw), theirs, equal_nan=True)


@pytest.mark.parametrize("name", sorted(GAUSS_RMSE))
def test_gaussian_round_trip_error_bound(name):
    x = np.random.default_rng(11).standard_normal((8, 4096)).astype(np.float32)
    if name == "q8_K":  # ggml quantizes to q8_K only for dot products: its reference quantizer
        blocks = q.quantize_row_q8_K_ref(x)
    else:
        blocks = q.ggml_quantize_chunk(name, x, imatrix=np.ones(4096) if q.ggml_quantize_requires_imatrix(name) else None)
    assert blocks.size == 8 * g.ggml_row_size(name, 4096)
    err = np.sqrt(np.mean((q.dequantize(name, blocks).reshape(x.shape) - x) ** 2))
    assert err < GAUSS_RMSE[name]
    # and no type is suspiciously exact (a bound that cannot fail is no bound)
    assert err > GAUSS_RMSE[name] / 3


@pytest.mark.parametrize("name", CHUNK_TYPES)
def test_every_type_survives_degenerate_rows(name):
    rng = np.random.default_rng(5)
    rows = {"zeros": np.zeros(256), "constant": np.full(256, 0.25), "negative": np.full(256, -0.5),
            "spike": np.eye(1, 256, 3)[0] * 3, "alternating": np.tile([1.0, -1.0], 128),
            "tiny": rng.standard_normal(256) * 1e-30}
    for case, row in rows.items():
        for w in (None, np.ones(256), np.zeros(256)):
            if w is None and q.ggml_quantize_requires_imatrix(name):
                continue
            d = q.dequantize(name, getattr(q, f"quantize_{name}")(row, 1, 256, w))
            assert np.isfinite(d).all(), (case, w)
            if case == "zeros":
                assert not d.any(), case


def test_imatrix_lowers_the_weighted_error():
    x = np.random.default_rng(2).standard_normal((2, 256)).astype(np.float32)
    w = np.where(np.arange(256) % 4 == 0, 10.0, 0.01)  # varies inside every block, where ggml uses it
    for name in ("q4_0", "q4_K", "q3_K", "q2_K", "q6_K", "iq4_nl"):
        d_w = q.dequantize(name, q.ggml_quantize_chunk(name, x, imatrix=w)).reshape(x.shape)
        d_0 = q.dequantize(name, q.ggml_quantize_chunk(name, x)).reshape(x.shape)
        assert np.sum(w * (d_w - x) ** 2) < 0.8 * np.sum(w * (d_0 - x) ** 2), name


def test_chunk_matches_the_per_type_quantizers():
    x = np.random.default_rng(4).standard_normal((3, 512)).astype(np.float32)
    w = np.random.default_rng(4).random(512) + 0.5
    for name in CHUNK_TYPES:
        assert np.array_equal(q.ggml_quantize_chunk(name, x, imatrix=w), getattr(q, f"quantize_{name}")(x, 3, 512, w)), name
    assert np.array_equal(q.ggml_quantize_chunk("f16", x).view(np.float16), x.ravel().astype(np.float16))
    assert np.array_equal(q.ggml_quantize_chunk("f32", x).view(np.float32), x.ravel())


def test_bad_input_is_rejected_before_ggml():
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    cases = [
        (lambda: q.quantize_row_q4_0_ref(x[:40]), "whole number"),
        (lambda: q.quantize_row_q4_K_ref(x[:128]), "whole number"),
        (lambda: q.quantize_q4_0(x, 1, 200), "holds 256 values"),
        (lambda: q.quantize_q4_0(x, 2, 128, np.ones(64)), "one weight per column"),
        (lambda: q.quantize_q4_0(x, 1, 256, -np.ones(256)), ">= 0"),
        (lambda: q.quantize_q4_0(x, 1, 256, np.full(256, np.nan)), "finite"),
        (lambda: q.quantize_iq2_xxs(x, 1, 256), "importance matrix"),
        (lambda: q.ggml_quantize_chunk("iq1_s", x), "importance matrix"),
        (lambda: q.quantize_iq3_s(x * 1e12, 1, 256), "magnitude"),
        (lambda: q.quantize_iq2_xs(x, 1, 256, np.full(256, 1e30)), "magnitude"),
        (lambda: q.quantize_q8_0(np.where(np.arange(256) == 9, np.nan, x)), "element 9"),
        (lambda: q.quantize_q8_0(np.where(np.arange(256) == 3, np.inf, x)), "finite"),
        (lambda: q.ggml_quantize_chunk("q8_K", x), "cannot quantize"),
        (lambda: q.ggml_quantize_chunk(g.GGML_TYPE_I32, x), "cannot quantize"),
        (lambda: q.ggml_quantize_chunk(33, x), "not a ggml type"),
        (lambda: q.ggml_quantize_chunk("q9_9", x), "unknown ggml type"),
        (lambda: q.dequantize_row_q4_0(np.zeros(17, np.uint8), 32), "18 bytes"),
        (lambda: q.dequantize_row_q4_0(np.zeros(36, np.uint8), 48), "whole number"),
        (lambda: q.dequantize_row_q4_0(np.zeros(17, np.uint8)), "whole number"),
        (lambda: q.dequantize_row_q4_0(np.zeros(18), 32), "bytes"),
        (lambda: q.dequantize_row_q4_0(np.zeros(18, np.uint8), 0), "positive"),
        (lambda: q.quantize_q4_0(x, 1.5, 256), "whole number"),
        (lambda: q.iq2xs_init_impl("q4_0"), "no IQ2 grid"),
        (lambda: q.iq3xs_init_impl(128), "256"),
    ]
    for call, message in cases:
        with pytest.raises(GGMLError, match=message):
            call()


def test_grid_magnitude_limit_is_safe_in_ggml():
    """At the largest magnitude ggmlpy lets through, ggml's own grid search must not abort
    (checked on the raw C functions, in a child process); 1e6 times beyond it, it does."""
    code = textwrap.dedent("""
        import sys, numpy as np
        from ggmlpy.bindings import ffi, lib
        from ggmlpy.core import quants as kernels, types
        scale = float(sys.argv[1])
        for name in sys.argv[2].split(","):
            t = types.type_id(name)
            for wmax in (1.0, 1e6):
                x = np.random.default_rng(0).standard_normal(512).astype(np.float32)
                x *= np.float32(scale * (kernels.GRID_MAX_CUBE / wmax) ** (1 / 3) / np.abs(x).max())
                w = np.full(256, wmax, np.float32)
                out = np.zeros(2 * int(lib.ggml_type_size(t)), np.uint8)
                lib.ggml_quantize_init(t)
                getattr(lib, "quantize_" + name)(ffi.from_buffer("float[]", x), ffi.from_buffer(out), 2, 256,
                                                  ffi.from_buffer("float[]", w))
        print("survived")
    """)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout's ggmlpy
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    ok = subprocess.run([sys.executable, "-c", code, "1.0", "iq2_xxs,iq2_xs,iq2_s,iq3_xxs,iq3_s,iq1_s,iq1_m"],
                        capture_output=True, text=True, timeout=600, env=env)
    assert ok.returncode == 0 and "survived" in ok.stdout, ok.stderr[-2000:]
    beyond = subprocess.run([sys.executable, "-c", code, "1e6", "iq2_xs"], capture_output=True, text=True,
                            timeout=600, env=env)
    assert beyond.returncode != 0  # the guard guards something real


def test_validate_row_data_finds_nan_scales():
    blocks = q.quantize_q4_0(np.ones(64))
    assert q.ggml_validate_row_data("q4_0", blocks)
    bad = blocks.copy()
    bad[18:20] = np.frombuffer(np.float16(np.nan).tobytes(), np.uint8)  # the second block's scale
    assert not q.ggml_validate_row_data("q4_0", bad)
    assert not q.ggml_validate_row_data("f32", np.array([1.0, np.inf], np.float32).view(np.uint8))
    with pytest.raises(GGMLError, match="whole number"):
        q.ggml_validate_row_data("q4_0", blocks[:20])


def test_quantize_init_free_and_requires_imatrix():
    q.ggml_quantize_free()
    q.ggml_quantize_free()  # twice is safe
    x = np.random.default_rng(1).standard_normal(256)
    # a quantizer after a free builds its grid again instead of aborting in ggml
    a = q.quantize_iq3_xxs(x, 1, 256)
    q.ggml_quantize_free()
    assert np.array_equal(q.quantize_iq3_xxs(x, 1, 256), a)
    assert [t for t in CHUNK_TYPES if q.ggml_quantize_requires_imatrix(t)] == ["iq1_s", "iq2_xs", "iq2_xxs"]
