"""Port of ggmlR's tests/testthat/test-version.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_version_function_works():
    """version function works"""
    version = ggml_version()
    expect_type(version, "character")
    # ggmlR bundles its own ggml fork (0.11.0); ggmlpy is pinned to ggml 0.25.3
    expect_equal(version, "0.25.3")


def test_test_function_works():
    """test function works"""
    result = ggml_test()
    assert result

