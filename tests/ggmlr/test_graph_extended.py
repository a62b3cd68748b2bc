"""Port of ggmlR's tests/testthat/test-graph-extended.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_graph_overhead_returns_positive_value():
    """graph_overhead returns positive value"""
    overhead = ggml_graph_overhead()
    expect_type(overhead, "double")
    assert overhead > 0


def test_graph_n_nodes_counts_operations_correctly():
    """graph_n_nodes counts operations correctly"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)

    c = ggml_add(ctx, a, b)
    graph = ggml_build_forward_expand(ctx, c)
    expect_equal(ggml_graph_n_nodes(graph), 1)

    ggml_reset(ctx)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    c = ggml_add(ctx, a, b)
    d = ggml_mul(ctx, c, a)
    graph2 = ggml_build_forward_expand(ctx, d)
    assert ggml_graph_n_nodes(graph2) >= 2

    ggml_free(ctx)


def test_graph_node_retrieves_correct_node():
    """graph_node retrieves correct node"""
    ctx = ggml_init(16 * 1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 10)
    c = ggml_add(ctx, a, b)

    graph = ggml_build_forward_expand(ctx, c)

    node = ggml_graph_node(graph, 0)
    expect_type(node, "externalptr")

    ggml_free(ctx)


