"""The llama family: RMSNorm and rotary embeddings (ag_rms_norm, ag_rope; their forward, gradients
and tangents are in op_cases' table with every other primitive), and the model, against the numpy
reference in llama_reference.py."""
import numpy as np
import pytest

import ggmlpy as g

from llama_reference import rms_norm, rope

rng = np.random.default_rng(11)


def test_rope_at_i32_positions_equals_integer_positions_and_the_reference():
    x = rng.standard_normal((8, 3, 5, 2))
    pos = [4, 9, 0, 2, 30]
    want = rope(x, pos, mode=0, freq_base=500.0)
    as_list = g.ag_rope(g.ag_tensor(x), pos, freq_base=500.0).numpy()
    as_i32 = g.ag_rope(g.ag_tensor(x), g.ag_tensor(np.array(pos).reshape(5, 1), dtype="i32"), freq_base=500.0).numpy()
    np.testing.assert_allclose(as_list, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(as_i32, as_list)


def test_rope_modes_differ_and_normal_mode_on_permuted_rows_is_neox():
    """llama.cpp's conversion reorders each head's rows so that its "normal" pairs (2i, 2i+1) hold
    what Hugging Face's halves (i, i + d/2) held: the same rotation, read in another order."""
    hd = 8
    x = rng.standard_normal((hd, 2, 4))
    neox = g.ag_rope(g.ag_tensor(x), mode=2).numpy()
    normal = g.ag_rope(g.ag_tensor(x), mode=0).numpy()
    assert np.abs(neox - normal).max() > 0.1
    order = np.arange(hd).reshape(2, hd // 2).T.ravel()  # row 2i <- i, row 2i+1 <- i + hd/2
    np.testing.assert_allclose(g.ag_rope(g.ag_tensor(x[order]), mode=0).numpy(), neox[order], rtol=1e-5, atol=1e-6)


def test_rms_norm_with_gamma_and_batch_axes():
    x, gamma = rng.standard_normal((6, 4, 3)), rng.standard_normal((6, 1))
    np.testing.assert_allclose(g.ag_rms_norm(g.ag_tensor(x), 1e-6, g.ag_tensor(gamma)).numpy(),
                               rms_norm(x, 1e-6, gamma[:, 0]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs,match", [
    (dict(pos=[1, 2]), "pos must hold 4"),
    (dict(pos=[0.5, 1, 2, 3]), "pos must hold 4 integer"),
    (dict(n_dims=3), "n_dims must be an even integer"),
    (dict(n_dims=8), "n_dims must be an even integer"),
    (dict(mode=1), "mode must be 0"),
    (dict(freq_base=float("nan")), "freq_base must be a finite number"),
    (dict(n_ctx_orig=-1), "n_ctx_orig"),
])
def test_rope_argument_errors(kwargs, match):
    with pytest.raises(g.GGMLError, match=match):
        g.ag_rope(g.ag_tensor(rng.standard_normal((6, 2, 4))), **kwargs)


def test_rope_and_rms_norm_shape_errors():
    with pytest.raises(g.GGMLError, match="ag_rope: x must be"):
        g.ag_rope(g.ag_tensor(np.ones((4, 3))))
    with pytest.raises(g.GGMLError, match="i32 positions"):
        g.ag_rope(g.ag_tensor(np.ones((4, 1, 2))), g.ag_tensor(np.ones((2, 1))))
    with pytest.raises(g.GGMLError, match="eps"):
        g.ag_rms_norm(g.ag_tensor(np.ones((4, 3))), -1.0)
