"""Port of ggmlR's tests/testthat/test-threading.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


@pytest.fixture(autouse=True)
def _restore_threads():
    """The thread setting is process-wide: put it back for the tests that follow."""
    import os
    import ggmlpy
    old, env = ggmlpy.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    yield
    ggmlpy.set_num_threads(old)
    if env is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = env


def test_ggml_set_omp_threads_runs_without_error():
    """ggml_set_omp_threads runs without error"""
    ggml_set_omp_threads(2)
    assert ggml_get_n_threads() == 2  # ggmlpy: also graph compute's default


def test_ggml_set_omp_threads_accepts_1_thread():
    """ggml_set_omp_threads accepts 1 thread"""
    ggml_set_omp_threads(1)
    assert ggml_get_n_threads() == 1
    ggml_set_omp_threads(2)

