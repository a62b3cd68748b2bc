"""Port of ggmlR's tests/testthat/test-graph-utils.R (ggmlR 0.8.2)."""
import numpy as np  # noqa: F401
import pytest  # noqa: F401

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError  # noqa: F401

from .rlike import *  # noqa: F401,F403


def test_ggml_graph_get_tensor_finds_tensor_by_name():
    """ggml_graph_get_tensor finds tensor by name"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_name(a, "my_tensor")
    ggml_set_f32(a, c(1, 2, 3, 4))
    ggml_set_input(a)

    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_name(b, "other")
    ggml_set_f32(b, c(5, 6, 7, 8))
    ggml_set_input(b)

    r = ggml_add(ctx, a, b)
    ggml_set_name(r, "result")
    ggml_set_output(r)

    graph = ggml_build_forward_expand(ctx, r)

    found = ggml_graph_get_tensor(graph, "my_tensor")
    expect_type(found, "externalptr")
    expect_equal(ggml_get_name(found), "my_tensor")


def test_ggml_graph_print_runs_without_error(capsys):
    """ggml_graph_print runs without error"""
    ctx = ggml_init(1024 * 1024)

    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, 2, 3, 4))
    ggml_set_input(a)

    r = ggml_relu(ctx, a)
    ggml_set_output(r)

    graph = ggml_build_forward_expand(ctx, r)
    (ggml_graph_print(graph))
    out = capsys.readouterr().out
    assert "n_nodes = 1" in out and "RELU" in out and "n_leafs = 1" in out


def test_ggml_graph_reset_runs_without_error():
    """ggml_graph_reset runs without error

    ggmlR skips this block (a graph needs gradients); ggmlpy's graphs built with grads=True have them,
    and a graph without them gets a clear error instead of ggml's assertion."""
    ctx = ggml_init(16 * 1024 * 1024)
    a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4)
    ggml_set_f32(a, c(1, -2, 3, -4))
    r = ggml_relu(ctx, a)
    graph = ggml_new_graph(ctx, 64, True)
    ggml_build_forward_expand(graph, r)
    ggml_graph_reset(graph)
    ggml_graph_compute(ctx, graph)
    expect_equal(ggml_get_f32(r).ravel(), c(1, 0, 3, 0))
    with pytest.raises(GGMLError, match="no gradients"):
        ggml_graph_reset(ggml_build_forward_expand(ctx, r))
    ggml_free(ctx)

