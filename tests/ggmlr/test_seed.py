"""ggmlR's tests/testthat/test-seed.R: ggml_set_seed.

ggmlR's seed sets R's generator, which all its randomness uses; ggmlpy's sets ggmlpy's own
numpy generator (ggmlpy.random.generator()), which all of ggmlpy's randomness uses (weight
initialisation, dropout masks, shuffling). The parsnip and mlr3 engines are R-only."""
import numpy as np
import pytest

import ggmlpy as g


def runif(n):
    return g.random.generator().uniform(size=n)


def test_ggml_set_seed_reproduces_base_r_rng_draws():
    g.ggml_set_seed(123)
    a = runif(5)
    g.ggml_set_seed(123)
    b = runif(5)
    np.testing.assert_array_equal(a, b)
    g.ggml_set_seed(124)
    c = runif(5)
    assert not np.allclose(a, c)


def test_ggml_set_seed_null_is_a_no_op_and_bad_input_errors():
    assert g.ggml_set_seed(None) is None
    assert g.ggml_set_seed(1) == 1  # R: invisible(1L)
    with pytest.raises(g.GGMLError, match="single"):
        g.ggml_set_seed([1, 2])
    with pytest.raises(g.GGMLError, match="single"):
        g.ggml_set_seed(float("nan"))  # R's NA_integer_


def test_ggml_set_seed_makes_model_initialisation_and_dropout_reproducible():
    """Not in ggmlR's file: what its parsnip/mlr3 blocks check, on the ag_* API."""
    def run(seed):
        g.ggml_set_seed(seed)
        model = g.ag_sequential(g.ag_linear(4, 8, "relu"), g.ag_dropout(0.5), g.ag_linear(8, 2))
        return model(g.ag_tensor(np.ones((4, 3)))).data

    np.testing.assert_array_equal(run(7), run(7))
    assert not np.allclose(run(7), run(8))


@pytest.mark.skip(reason="R-only: the parsnip engine")
def test_parsnip_ggml_engine_seed_makes_classification_reproducible():
    pass


@pytest.mark.skip(reason="R-only: the parsnip engine")
def test_parsnip_ggml_engine_seed_makes_regression_reproducible():
    pass


@pytest.mark.skip(reason="R-only: the mlr3 learners")
def test_mlr3_classif_ggml_exposes_seed_and_trains_reproducibly():
    pass


@pytest.mark.skip(reason="R-only: the mlr3 learners")
def test_mlr3_regr_ggml_exposes_seed_and_trains_reproducibly():
    pass
