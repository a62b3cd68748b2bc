"""If on a condition known when the graph is planned: the chosen branch's nodes are built in place.

A ggml graph has no control flow, so `If` is planned for its condition's value, as NonZero's count
or a Reshape's shape is: a condition computed from constants is folded at load, a fed one makes the
model plan for its value (shaping.py), and one computed in the graph defers the If and what depends
on it to a next stage, planned for the condition's value once the graph computed it (plan.py). The
plan takes the chosen branch's nodes in the If's place (branch_nodes), so that a host step among them
(NonMaxSuppression...) is deferred as at the top level. The branch's nodes may read the outer graph's
values by name; its outputs are the If's.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from .graph import const
from .op_table import op


@op("If", const_inputs=(0,))
def _if(b, node, ins, at):
    """Never built as a node: the plan puts the chosen branch's nodes in the If's place (branch_nodes)
    when the condition is known, and defers the If to the stage that computed it otherwise. The table
    entry says that If is supported and that its condition is one of the values planning needs."""
    raise b.fail("If reached the graph builder: the plan replaces it by its branch or defers it")


def branch_nodes(b, node, cond) -> tuple:
    """(nodes, constants) an If on the known condition `cond` (a constant Val) stands for: the chosen
    branch's nodes, then an Identity from each of its outputs to the If's; its initializers as Vals."""
    b.need(np.size(cond.const) == 1, f"If's condition must hold one value, got shape {list(cond.shape)}")
    branch = node.attribute[[a.name for a in node.attribute].index(
        "then_branch" if bool(np.asarray(cond.const).reshape(-1)[0]) else "else_branch")].g
    b.need(len(branch.output) == len(node.output), f"the branch '{branch.name}' has {len(branch.output)} outputs "
                                                   f"for the If's {len(node.output)}")
    outs = [helper.make_node("Identity", [o.name], [name], name=f"{node.name or name}/{branch.name}:{name}")
            for o, name in zip(branch.output, node.output) if name]
    inits = {i.name: const(numpy_helper.to_array(i), i.data_type) for i in branch.initializer}
    return list(branch.node) + outs, inits
