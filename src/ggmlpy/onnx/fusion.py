"""Graph patterns built as one ggml op instead of node by node.

Exporters write GELU as Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5 (five ONNX nodes, and
Erf alone is a fifteen-op polynomial here); ggml has the exact op, ggml_gelu_erf.

On ggml's CPU backend a convolution is one node of ggmlpy's conv.c kernel, which also adds a
residual and applies ReLU to each block while it is in cache: Conv -> Relu, Conv -> Add(r) and
Conv -> Add(r) -> Relu (a ResNet block's end) are built as that one node, and so may be a MaxPool
that alone reads such a pattern's output (a ResNet's stem: the pooling reads the rows in cache); a
linear layer's MatMul -> Add(bias) is one node of its linear kernel, which may also apply the GELU
that alone reads it, add a residual (Add) that alone reads it, or write its rows apart for the
Transpose that takes an attention's stacked q, k, v apart; and an attention node may write its heads
side by side for the Transpose that puts them there. The finders here only select candidates from
the ONNX graph (what reads what); the builders check the ggml tensors and shapes, and build the nodes
one by one otherwise.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
from onnx import numpy_helper


def const_values(graph, initializers) -> dict:
    """The values known before planning, by name: initializers, Constant nodes' values, and the
    Identity copies exporters make of shared weights."""
    vals = dict(initializers)
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            vals[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        elif n.op_type == "Identity" and n.input and n.input[0] in vals:  # exporters alias shared weights
            vals[n.output[0]] = vals[n.input[0]]
    return vals


def _scalar(vals, name, want, tol=1e-6):
    v = vals.get(name)
    return v is not None and np.size(v) == 1 and abs(float(np.asarray(v).reshape(-1)[0]) - want) <= tol * abs(want)


class GraphIndex:
    """What the finders read of a graph, counted once: its nodes in order; how many times each value
    is read (`uses`, a graph output counting 100 so that it is never folded away; `data_uses`, the
    same without the reads of Shape and Size, which take a value's shape, known when planning, never
    its elements); the first node reading each value and the node producing it (indices); and the
    constant values (initializers and Constant nodes) by name."""

    def __init__(self, graph, initializers):
        self.nodes = list(graph.node)
        self.uses = defaultdict(int)
        self.consumer, self.producer = {}, {}
        for j, n in enumerate(self.nodes):
            for i in n.input:
                self.uses[i] += 1
                self.consumer.setdefault(i, j)
            for o in n.output:
                self.producer[o] = j
        for o in graph.output:
            self.uses[o.name] += 100
        self.data_uses = defaultdict(int, self.uses)
        for n in self.nodes:
            if n.op_type in ("Shape", "Size") and n.domain in ("", "ai.onnx"):
                for i in n.input:
                    self.data_uses[i] -= 1
        self.vals = const_values(graph, initializers)


def find_conv_epilogues(ix: GraphIndex) -> tuple[dict, set]:
    """(fused, skipped): fused maps the index of a pattern's last node (the Add, the Relu or the
    MaxPool) to (the Conv's index, the residual's name or None, whether a ReLU follows, the MaxPool's
    index or None, the pattern's indices in order); skipped holds the indices before the last. A
    node's output read by anything else, or a graph output, ends the pattern before it; a MaxPool
    with an Indices output is not taken."""
    nodes, uses, consumer = ix.nodes, ix.uses, ix.consumer

    def only(name, op):
        j = consumer.get(name)
        if uses[name] != 1 or j is None or nodes[j].op_type != op or nodes[j].domain not in ("", "ai.onnx"):
            return None
        return j

    fused, skipped = {}, set()
    for i, n in enumerate(nodes):
        if n.op_type != "Conv" or n.domain not in ("", "ai.onnx") or len(n.output) != 1:
            continue
        c = n.output[0]
        residual, last = None, i
        add = only(c, "Add")
        if (add is not None and add not in fused and add not in skipped  # not another conv's already
                and len(nodes[add].input) == 2 and nodes[add].input[0] != nodes[add].input[1]):
            residual = nodes[add].input[1] if nodes[add].input[0] == c else nodes[add].input[0]
            last = add
        relu = only(nodes[last].output[0], "Relu")
        if relu is not None:
            last = relu
        pool = only(nodes[last].output[0], "MaxPool")
        if pool is not None and not (len(nodes[pool].output) > 1 and nodes[pool].output[1]):
            last = pool
        else:
            pool = None
        if last == i:
            continue
        members = (i,) + tuple(j for j in (add if residual is not None else None, relu, pool) if j is not None)
        fused[last] = (i, residual, relu is not None, pool, members)
        skipped |= set(members[:-1])
    return fused, skipped


def find_linear_bias(ix: GraphIndex) -> tuple[dict, set]:
    """(fused, skipped) for MatMul(x, W) -> Add(b) with W a constant matrix and b a constant of W's
    column count (a linear layer as exporters write it, built as conv.c's one linear node): fused maps
    the Add's index to (the MatMul's index, b's name, both indices); skipped holds the MatMuls."""
    vals, nodes, uses, consumer = ix.vals, ix.nodes, ix.uses, ix.consumer
    fused, skipped = {}, set()
    for i, n in enumerate(nodes):
        if n.op_type != "MatMul" or n.domain not in ("", "ai.onnx") or len(n.input) != 2:
            continue
        w = vals.get(n.input[1])
        out = n.output[0]
        j = consumer.get(out)
        if w is None or np.ndim(w) != 2 or uses[out] != 1 or j is None:
            continue
        add = nodes[j]
        if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or len(add.input) != 2:
            continue
        bias = add.input[1] if add.input[0] == out else add.input[0]
        bv = vals.get(bias)
        if bias == out or bv is None or np.size(bv) != np.shape(w)[1] or np.shape(bv)[-1:] != np.shape(w)[1:]:
            continue
        fused[j] = (i, bias, (i, j))
        skipped.add(i)
    return fused, skipped


_RESHAPING = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity")
_PRODUCTS = ("MatMul", "Gemm", "Add")  # Add: find_linear_bias's MatMul + bias ends in it


def _from_product(nodes, uses, producer, name) -> bool:
    """Whether value `name` comes from a product (MatMul, Gemm, or a MatMul + bias ending in an Add)
    through reshaping nodes at most, nothing else reading the elements of the product's output or of
    the values on the way (`uses`: GraphIndex.data_uses)."""
    while uses[name] == 1 and name in producer:
        n = nodes[producer[name]]
        if n.domain not in ("", "ai.onnx"):
            return False
        if n.op_type in _PRODUCTS:
            return True
        if n.op_type not in _RESHAPING:
            return False
        name = n.input[0]
    return False


def find_linear_residual(ix: GraphIndex) -> dict:
    """Add(y, r) where y comes from a product (_from_product): maps the Add's index to (y's name, r's
    name). The product's node may add r itself; whether it is a linear layer's node, in y's memory
    order, and r of y's shape, is the builder's to check."""
    nodes, uses, producer = ix.nodes, ix.data_uses, ix.producer
    found = {}
    for a, add in enumerate(nodes):
        if add.op_type != "Add" or add.domain not in ("", "ai.onnx") or len(add.input) != 2 or \
                add.input[0] == add.input[1]:
            continue
        for y, r in (add.input, add.input[::-1]):
            if _from_product(nodes, uses, producer, y):
                found[a] = (y, r)
                break
    return found


def transposes_of_products(ix: GraphIndex) -> set:
    """Indices of the Transposes whose input comes from a product (_from_product): the product's node
    may write the transposed layout itself (an attention's stacked q, k, v taken apart: the builder
    checks that the transposition is that)."""
    nodes, uses, producer = ix.nodes, ix.data_uses, ix.producer
    return {j for j, n in enumerate(nodes) if n.op_type == "Transpose" and n.domain in ("", "ai.onnx")
            and _from_product(nodes, uses, producer, n.input[0])}


def find_gelu(ix: GraphIndex) -> tuple[dict, set]:
    """(fused, skipped): fused maps the index of a pattern's last node to the name of its input x;
    skipped holds the indices of the other nodes of each pattern."""
    vals, nodes, uses = ix.vals, ix.nodes, ix.uses

    def other(n, name):
        ins = list(n.input)
        if len(ins) != 2 or name not in ins:
            return None
        return ins[1] if ins[0] == name else ins[0]

    def single_consumer(name, op):
        j = ix.consumer.get(name)
        if uses[name] != 1 or j is None:
            return None
        return (j, nodes[j]) if nodes[j].op_type == op else None

    fused, skipped = {}, set()
    for i, n in enumerate(nodes):
        if n.op_type == "Div" and _scalar(vals, n.input[1], np.sqrt(2.0)):
            x = n.input[0]
        elif n.op_type == "Mul" and len(n.input) == 2 and any(_scalar(vals, k, 1 / np.sqrt(2.0)) for k in n.input):
            x = n.input[0] if _scalar(vals, n.input[1], 1 / np.sqrt(2.0)) else n.input[1]
        else:
            continue
        erf = single_consumer(n.output[0], "Erf")
        add = erf and single_consumer(erf[1].output[0], "Add")
        if not add or not _scalar(vals, other(add[1], erf[1].output[0]), 1.0):
            continue
        mul = single_consumer(add[1].output[0], "Mul")
        if not mul or other(mul[1], add[1].output[0]) != x:
            continue
        half = single_consumer(mul[1].output[0], "Mul")
        if not half or not _scalar(vals, other(half[1], mul[1].output[0]), 0.5):
            continue
        fused[half[0]] = x
        skipped |= {i, erf[0], add[0], mul[0]}
    return fused, skipped


def gelu_input_private(ix: GraphIndex, fused: dict) -> set:
    """The indices in find_gelu's `fused` whose input x only its own pattern reads (its Div or Mul by
    1/sqrt 2 and its Mul by x; not a graph output): the node computing x may apply the GELU itself."""
    return {k for k, x in fused.items() if ix.uses[x] == 2}


def heads_transposed(ix: GraphIndex) -> set:
    """Names of values (..., H, L, E) that only a Transpose reads which keeps E last and puts L before H
    ((..., L, H, E), or (L, B, H, E) from (B, H, L, E) as batch_first=False exporters write it): an
    attention's heads put side by side for its output projection. The attention node may write them
    that way; the Transpose then reads them in place where their order is its output's (B = 1)."""
    uses = ix.uses
    found = set()
    for n in ix.nodes:
        if n.op_type != "Transpose" or n.domain not in ("", "ai.onnx") or uses[n.input[0]] != 1:
            continue
        perm = next((list(a.ints) for a in n.attribute if a.name == "perm"), None)
        r = len(perm) if perm else 0
        if r >= 3 and sorted(perm) == list(range(r)) and perm[-1] == r - 1 and perm.index(r - 2) < perm.index(r - 3):
            found.add(n.input[0])
    return found


def products_of(ix: GraphIndex) -> dict:
    """Each value a Mul computes that nothing else reads the elements of (GraphIndex.data_uses) -> the Mul's two
    inputs: an attention's query or key scaled by a constant before its first product, whose
    constant the builder may fold into the attention's scale."""
    uses = ix.data_uses
    return {n.output[0]: tuple(n.input) for n in ix.nodes if n.op_type == "Mul" and n.domain in ("", "ai.onnx")
            and len(n.input) == 2 and uses[n.output[0]] == 1}


def find_attention(ix: GraphIndex) -> tuple[dict, set]:
    """(fused, skipped) for scaled dot-product attention as exporters write it: MatMul(Q, K^T) ->
    optional Mul or Div by a constant scalar -> optional Add(mask) -> Softmax -> MatMul(., V), each
    intermediate read by the next node alone (built as attention.c's one node). fused maps the last
    MatMul's index to (the first MatMul's index, the scale (1.0 without one), the mask's name or
    None, the Softmax's index, the pattern's indices in order); skipped holds the indices before the
    last. Whether the shapes and the Softmax's axis fit is the builder's to check."""
    vals, nodes, uses, consumer = ix.vals, ix.nodes, ix.uses, ix.consumer

    def next_node(name):
        j = consumer.get(name)
        if uses[name] != 1 or j is None or nodes[j].domain not in ("", "ai.onnx"):
            return None
        return j

    def scalar(name):
        v = vals.get(name)
        if v is None or np.size(v) != 1 or np.asarray(v).dtype.kind != "f":
            return None
        return float(np.asarray(v).reshape(-1)[0])

    fused, skipped = {}, set()
    for i, n in enumerate(nodes):
        if n.op_type != "MatMul" or n.domain not in ("", "ai.onnx") or len(n.input) != 2 or len(n.output) != 1:
            continue
        members, scale, mask = [i], 1.0, None
        cur = n.output[0]
        j = next_node(cur)
        if j is not None and nodes[j].op_type in ("Mul", "Div") and len(nodes[j].input) == 2:
            a, c = nodes[j].input
            s = scalar(c) if a == cur else scalar(a) if nodes[j].op_type == "Mul" and c == cur else None
            if s is not None and s != 0.0 and np.isfinite(s):
                scale = s if nodes[j].op_type == "Mul" else 1.0 / s
                members.append(j)
                cur = nodes[j].output[0]
                j = next_node(cur)
        if j is not None and nodes[j].op_type == "Add" and len(nodes[j].input) == 2 and \
                nodes[j].input[0] != nodes[j].input[1]:
            mask = nodes[j].input[1] if nodes[j].input[0] == cur else nodes[j].input[0]
            members.append(j)
            cur = nodes[j].output[0]
            j = next_node(cur)
        if j is None or nodes[j].op_type != "Softmax":
            continue
        sm = j
        members.append(sm)
        cur = nodes[sm].output[0]
        j = next_node(cur)
        if j is None or nodes[j].op_type != "MatMul" or len(nodes[j].input) != 2 or nodes[j].input[0] != cur \
                or nodes[j].input[1] == cur:
            continue
        members.append(j)
        if any(m in skipped or m in fused for m in members):
            continue
        fused[j] = (i, scale, mask, sm, tuple(members))
        skipped |= set(members[:-1])
    return fused, skipped
