"""Port of ggmlR's tests/testthat/test-threading.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403

# Tests for threading functions


def test_ggml_set_omp_threads_runs_without_error():
    """ggml_set_omp_threads runs without error"""
    ggml_set_omp_threads(2)


def test_ggml_set_omp_threads_accepts_1_thread():
    """ggml_set_omp_threads accepts 1 thread"""
    ggml_set_omp_threads(1)
    # Restore to 2 for CRAN compliance
    ggml_set_omp_threads(2)

