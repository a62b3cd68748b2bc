"""ggmlR's own testthat files (Zabis13/ggmlR 0.8.2, tests/testthat/), ported to pytest.

One file per R file (test-foo-bar.R -> test_foo_bar.py), one test per `test_that` block,
one assert per expectation, with R's numbers. Blocks that test R-only behaviour are
skipped with a one-line reason; where ggmlR is wrong, the test asserts the right
behaviour and its docstring says how ggmlR differs (also listed in docs/divergences.md).
"""
import numpy as np
import pytest

# testthat's expect_equal: all.equal's tolerance, sqrt(machine epsilon) relative.
R_TOL = {"rtol": 1.5e-8, "atol": 0.0}
# ggmlR's result is an R double where ggmlpy's is float32: compare at float32's resolution.
F32_TOL = {"rtol": 1e-4, "atol": 1e-5}


def expect_equal(actual, expected, **tol):
    """testthat's expect_equal for numbers; float32 tolerance unless told otherwise."""
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64),
                               **(tol or F32_TOL))


@pytest.fixture
def ctx():
    """ggmlR's usual `ctx <- ggml_init(16 * 1024 * 1024)`, freed after the test."""
    import ggmlpy as g
    c = g.ggml_init(16 * 1024 * 1024)
    yield c
    g.ggml_free(c)
