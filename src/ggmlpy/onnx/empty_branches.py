"""Empty values met between stages: the branches that read them are computed on the host, the rest of
the stage stays in a ggml graph.

A stage (the nodes deferred after a host step, OnnxShapePlan.rest) may be fed an empty value: a
detection model's NonZero that finds no region at one FPN level. ggml has no empty tensors, so each
node that reads an empty value as data is evaluated on the host (plan.evaluate_on_host: numpy), with
whatever of the stage it needs first (the zero tensor that an empty scatter leaves as it is), and so
on for whatever reads an empty value it gives. What is left reads no empty value and is planned as a
ggml graph as before. A model whose every level has regions never takes this path.

Invariant: after `split_empty`, no node of the returned remainder reads an empty value as data.
"""
from __future__ import annotations

from .plan import data_input_names, evaluate_on_host


def _empty(a) -> bool:
    return getattr(a, "size", 1) == 0


def split_empty(model, nodes: list, values: dict, consts: dict) -> tuple[list, dict]:
    """(the nodes of `nodes` left for a ggml graph, the values computed on the host): every node that
    reads an empty value as data, with what it needs of `nodes` first, evaluated on the host (numpy)."""
    known = {n: v.const for n, v in consts.items()}
    known.update(values)
    producer = {o: i for i, node in enumerate(nodes) for o in node.output if o}
    done: set[int] = set()
    computed: dict = {}

    def evaluate(i):
        """Node i on the host, its producers in `nodes` first (a stage's nodes form no cycle)."""
        stack = [i]
        while stack:
            j = stack[-1]
            if j in done:
                stack.pop()
                continue
            missing = [producer[n] for n in nodes[j].input if n and n not in known]
            if missing:
                stack.extend(missing)
                continue
            out = evaluate_on_host(model, [nodes[j]], known, {}, outputs=[o for o in nodes[j].output if o])
            known.update(out)
            computed.update(out)
            done.add(j)
            stack.pop()

    changed = True
    while changed:
        changed = False
        for i, node in enumerate(nodes):
            if i in done:
                continue
            if any(n in known and _empty(known[n]) for n in data_input_names(node)):
                evaluate(i)
                changed = True
    rest = [node for i, node in enumerate(nodes) if i not in done]
    return rest, computed
