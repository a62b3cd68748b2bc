"""ggmlR's tests/testthat/test-seed.R: ggml_set_seed.

ggmlR's seed sets R's generator, which all its randomness uses; ggmlpy's sets ggmlpy's own
numpy generator (ggmlpy.random.generator()), which all of ggmlpy's randomness uses (weight
initialisation, dropout masks, shuffling). The parsnip engine's blocks run on
ggmlr_parsnip_fit_classif/regr, the mlr3 learners' on their Python counterparts, the
scikit-learn estimators (seed is their random_state)."""
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


def _iris():
    datasets = pytest.importorskip("sklearn.datasets", reason="the parsnip engine and the learners need scikit-learn")
    d = datasets.load_iris()
    return d.data, d.target_names[d.target]   # Species as labels


def _cars():
    """mtcars' shape (32 cars, 10 predictors of mpg): generated, as numpy has no mtcars."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 10))
    return x, x @ rng.normal(size=10) + 20


def test_parsnip_ggml_engine_seed_makes_classification_reproducible():
    x, species = _iris()

    def fit_with(s):
        fit = g.ggmlr_parsnip_fit_classif(x, species, hidden_layers=[16], epochs=5, dropout=0.1, batch_size=10,
                                          backend="cpu", seed=s)
        return fit.predict_proba(x)

    p1, p2, p3 = fit_with(7), fit_with(7), fit_with(8)
    np.testing.assert_array_equal(p1, p2)   # same seed -> identical
    assert not np.allclose(p1, p3)          # different seed -> different


def test_parsnip_ggml_engine_seed_makes_regression_reproducible():
    x, mpg = _cars()

    def fit_with(s):
        return g.ggmlr_parsnip_fit_regr(x, mpg, hidden_layers=[16], epochs=5, batch_size=8, backend="cpu",
                                        seed=s).predict(x)

    np.testing.assert_array_equal(fit_with(11), fit_with(11))


# mlr3's learners are, in Python, scikit-learn's estimators (ggmlpy.sklearn); seed is random_state
def test_mlr3_classif_ggml_exposes_seed_and_trains_reproducibly():
    x, species = _iris()
    from ggmlpy.sklearn import GGMLClassifier

    def fit_pred(s):
        return GGMLClassifier(epochs=5, batch_size=10, device="cpu", random_state=s).fit(x, species).predict_proba(x)

    assert "random_state" in GGMLClassifier().get_params()
    p1, p2, p3 = fit_pred(5), fit_pred(5), fit_pred(6)
    np.testing.assert_array_equal(p1, p2)
    assert not np.allclose(p1, p3)


def test_mlr3_regr_ggml_exposes_seed_and_trains_reproducibly():
    x, mpg = _cars()
    _iris()   # skips without scikit-learn
    from ggmlpy.sklearn import GGMLRegressor

    def fit_pred(s):
        return GGMLRegressor(epochs=5, batch_size=8, device="cpu", random_state=s).fit(x, mpg).predict(x)

    assert "random_state" in GGMLRegressor().get_params()
    np.testing.assert_array_equal(fit_pred(9), fit_pred(9))
