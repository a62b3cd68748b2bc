"""Which inputs of a graph (or of a stage of it) fix shapes or op parameters.

A ggml graph has static shapes and parameters: a Reshape's shape, a Slice's starts, a Resize's
scales... must be numbers on the host when the graph is planned. When such a value is an input
fed at run time (or is computed from one), the model reads those inputs' values on the host and
plans the graph for them: they join the plan cache's key (model.py, OnnxModel._plan).

The analysis is static: the inputs that builders declare they need as values (CONST_INPUTS),
traced upstream through the nodes that compute them. A Shape or Size node ends the trace (a
shape is known whatever the values), and CastLike's second input gives only a type. Builders
that find out during the build that they need a value (graph.NeedsValue) are traced the same way.
"""
from __future__ import annotations

from onnx import AttributeProto

from .graph import op_key
from .op_table import CONST_INPUTS
from .ops_host import HOST_OPS


def subgraphs(node) -> list:
    """The graphs a node carries (If's branches)."""
    return [a.g for a in node.attribute if a.type == AttributeProto.GRAPH] + \
        [g for a in node.attribute if a.type == AttributeProto.GRAPHS for g in a.graphs]


def has_subgraphs(nodes) -> bool:
    """Whether a node carries a graph of its own, whose nodes read the outer graph's values by name."""
    return any(subgraphs(n) for n in nodes)


def flattened(nodes) -> list:
    """The nodes with those of their subgraphs, at any depth (value names are unique across them)."""
    out = []
    for n in nodes:
        out.append(n)
        for g in subgraphs(n):
            out += flattened(g.node)
    return out


def _computed_from(n) -> list:
    """The values a node's outputs are computed from: its inputs, and its subgraphs' outputs."""
    if n.op_type == "CastLike":  # its target gives a type only
        return list(n.input[:1])
    return list(n.input) + [o.name for g in subgraphs(n) for o in g.output]


def upstream(nodes, names, inputs) -> set:
    """The members of `inputs` that the values `names` are computed from (themselves included). The
    trace ends at a host step's outputs (NonZero, NonMaxSuppression...: ops_host.py): what is computed
    from those is built in a next stage, which reads them on the host and is planned for their values,
    not for those of the graph's inputs (an image) they were computed from."""
    producer = {o: n for n in flattened(nodes) for o in n.output if o}
    seen, todo, found = set(names), list(names), set()
    while todo:
        name = todo.pop()
        if name in inputs:
            found.add(name)
            continue
        n = producer.get(name)
        # a shape is known whatever the values; a host step's outputs are a next stage's fed values
        if n is None or n.op_type in ("Shape", "Size") or op_key(n) in HOST_OPS:
            continue
        for i in _computed_from(n):
            if i and i not in seen:
                seen.add(i)
                todo.append(i)
    return found


def _parameters(n) -> list:
    """The values one node's builder needs on the host (CONST_INPUTS), by name."""
    return [n.input[i] for i in CONST_INPUTS.get(op_key(n), ()) if i < len(n.input) and n.input[i]]


def reads(node) -> list:
    """The values a node reads from its graph: its inputs and its subgraphs' (at any depth), some of which
    their own nodes compute."""
    return [i for n in flattened([node]) for i in n.input if i]


def value_inputs(nodes, inputs) -> set:
    """The members of `inputs` whose values fix shapes or op parameters of `nodes`. The condition of an
    If among `nodes` that is computed in the graph (not one of `inputs` itself) is left out: the graph
    is planned without its value, and the If with what depends on it is deferred to a next stage planned
    for the condition's value (plan.py), rather than the graph planned again for every value of the
    inputs it is computed from."""
    inputs, nodes = set(inputs), list(nodes)  # the same node objects below (a protobuf field may give new ones)
    top_ifs = {id(n) for n in nodes if n.op_type == "If"}
    names = {i for n in flattened(nodes) for k, i in enumerate(_parameters(n))
             if not (id(n) in top_ifs and k == 0 and i not in inputs)}
    return upstream(nodes, names, inputs)
