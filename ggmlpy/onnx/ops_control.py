"""If on a condition known when the graph is planned: the chosen branch's nodes are built in place.

A ggml graph has no control flow, so `If` is planned for its condition's value, as NonZero's count
or a Reshape's shape is: a condition computed from constants is folded at load, and one computed
from graph inputs makes the model plan for those inputs' values (shaping.py), one plan per value.
The branch's nodes may read the outer graph's values by name; its outputs are the If's.
"""
from __future__ import annotations

import numpy as np

from .op_table import op


@op("If", const_inputs=(0,))
def _if(b, node, ins, at):
    cond = ins[0]
    b.need_value(cond.is_const, "If's condition must be known when the graph is planned (a constant, or computed "
                                "from graph inputs only): ggml graphs have no control flow", cond)
    b.need(np.size(cond.const) == 1, f"If's condition must hold one value, got shape {list(cond.shape)}")
    branch = at["then_branch"] if bool(np.asarray(cond.const).reshape(-1)[0]) else at["else_branch"]
    b.need(len(branch.output) == len(node.output), f"the branch '{branch.name}' has {len(branch.output)} outputs "
                                                   f"for the If's {len(node.output)}")
    return b.inline(branch)
