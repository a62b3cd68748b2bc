"""nn_topo_sort (ggmlR's functional-graph order): each reachable node once, parents first."""
import pytest

import ggmlpy as g
from ggmlpy.errors import GGMLError


def test_diamond_and_two_outputs_each_node_once_parents_first():
    x = g.ggml_input(shape=4)
    a = g.ggml_layer_dense(x, 3)
    b = g.ggml_layer_dense(x, 3)
    s = g.ggml_layer_add([a, b])
    c = g.ggml_layer_dense(s, 2)
    order = g.nn_topo_sort([c, s, a])
    assert order == [x, a, b, s, c]        # depth first from the first output, in parent order
    assert g.nn_topo_sort(c) == order      # one node is a one-element list


def test_only_what_the_outputs_need():
    x, y = g.ggml_input(shape=2), g.ggml_input(shape=2)
    hx = g.ggml_layer_dense(x, 2)
    g.ggml_layer_dense(y, 2)
    assert g.nn_topo_sort(hx) == [x, hx]


def test_a_chain_deeper_than_the_recursion_limit():
    import sys
    x = g.ggml_input(shape=2)
    n = x
    for _ in range(sys.getrecursionlimit() + 100):
        n = g.ggml_layer_dense(n, 2)
    order = g.nn_topo_sort(n)
    assert order[0] is x and order[-1] is n and len(order) == sys.getrecursionlimit() + 101


def test_not_a_node():
    with pytest.raises(GGMLError, match="nodes"):
        g.nn_topo_sort(["x"])
