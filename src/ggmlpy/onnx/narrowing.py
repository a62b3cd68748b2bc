"""Computing only the rows a model's outputs read.

A classifier often keeps one row of its last layer: a ViT's head reads the class token,
`Gather(x, 0, axis=1)`, of a value every token of which was computed through layer norms, an MLP
and an attention's queries. Each of those ops computes a row from the same row of its inputs,
so the Gather (or a Slice) can move up to where the rows are first computed apart: the layer's MLP
then multiplies one row instead of 197, and the result is the same.

The pass works on the ONNX nodes, before any are built, with every value's static shape (onnx's
shape inference for the plan's input shapes). A *cut* (axis, start, stop) asks for the rows
[start, stop) of a value along one axis. Walking the nodes from last to first, a node is
*narrowed* (computes only the cut of its output) when every reader of its output asks for the
same cut and its op has a rule below: the rule says which cut of each input that needs (None: the
input is read whole, as a weight or a value broadcast along the axis). An input asked for a cut
whose producer cannot narrow (a graph input, a constant, a value other nodes read whole) is cut by
a Slice inserted before its reader. Shape and Size nodes read only a value's shape: they become
constants of the full shape and never stop a cut.

Invariant: a narrowed node's output holds exactly the cut rows of the original output, so every
reader gets what it read before, and the cut Gather or Slice that asked first (the *seed*) reads
them at shifted indices.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable, NamedTuple

import numpy as np
import onnx
from onnx import helper, numpy_helper


Cut = tuple  # (axis, start, stop): rows [start, stop) along axis, fewer than the axis holds


class NarrowedGraph(NamedTuple):
    """The part of a GraphProto that planning reads: nodes in order, and the graph's outputs; the
    outputs of the nodes narrowed, with the cut each computes; and the shape each of those and each
    seed's output must have when built (`expected`: a plan that builds another was narrowed on
    shapes onnx inferred wrong, and is planned whole instead)."""
    node: list
    output: list
    narrowed: dict
    expected: dict


# Ops computed element by element with numpy broadcasting: a cut of the output is the same cut of
# each input that has the axis (an input of extent 1 there, or without it, is read whole).
_ELEMENTWISE = {
    "Abs", "Acos", "Add", "And", "Asin", "Atan", "Cast", "Ceil", "Celu", "Clip", "Cos", "Cosh", "Div", "Elu",
    "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater", "GreaterOrEqual", "HardSigmoid", "HardSwish",
    "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Log", "Max", "Mean", "Min", "Mish",
    "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid",
    "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu",
    "Where", "Xor",
}
# Ops that give their input's elements a new shape: a cut maps to the input's axis with the same
# elements before it (Reshape's target shape is rewritten; the others' attributes stay valid).
_REGROUPING = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}
# Ops that only move data: narrowing them alone saves nothing worth a Slice.
_VIEWS = _REGROUPING | {"Transpose", "Identity"}


def _elementwise(node, cut, shp, ctx):
    a, s, e = cut
    out = shp(node.output[0])
    cuts = []
    for name in node.input:
        if not name:
            cuts.append(None)
            continue
        si = shp(name)
        if si is None:
            return None
        ai = a - (len(out) - len(si))
        cuts.append(None if ai < 0 or si[ai] == 1 else (ai, s, e))
    return cuts


def _normalization(node, cut, shp, ctx):
    """LayerNormalization over the axes from `axis` on: rows before them are independent."""
    x = shp(node.input[0])
    if x is None:
        return None
    first = ctx.attr(node, "axis", -1) % len(x)
    return [cut] + [None] * (len(node.input) - 1) if cut[0] < first else None


def _softmax(node, cut, shp, ctx):
    x = shp(node.input[0])
    if x is None:
        return None
    if ctx.opset >= 13:
        free = cut[0] != ctx.attr(node, "axis", -1) % len(x)
    else:  # opset < 13: softmax over the flattened axes from `axis` on
        free = cut[0] < ctx.attr(node, "axis", 1) % len(x)
    return [cut] if free else None


def _matmul(node, cut, shp, ctx):
    a, s, e = cut
    out, sa, sb = shp(node.output[0]), shp(node.input[0]), shp(node.input[1])
    if out is None or sa is None or sb is None or len(sa) < 2 or len(sb) < 2:
        return None
    if a == len(out) - 2:  # rows of the product: rows of A
        return [(len(sa) - 2, s, e), None]
    if a == len(out) - 1:  # its columns: columns of B
        return [None, (len(sb) - 1, s, e)]
    cuts = []  # a batch axis: cut in each operand that has it, as broadcasting aligns them
    for si in (sa, sb):
        ai = a - (len(out) - len(si))
        cuts.append(None if ai < 0 or si[ai] == 1 else (ai, s, e))
    return cuts


def _gemm(node, cut, shp, ctx):
    a, s, e = cut
    ta, tb = ctx.attr(node, "transA", 0), ctx.attr(node, "transB", 0)
    c = shp(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if a == 0:
        cuts = [(1 if ta else 0, s, e), None]
        cut_c = (0, s, e) if c is not None and len(c) == 2 and c[0] != 1 else None
    else:
        cuts = [None, (0 if tb else 1, s, e)]
        cut_c = (len(c) - 1, s, e) if c is not None and len(c) >= 1 and c[-1] != 1 else None
    return cuts + ([cut_c] if len(node.input) > 2 else [])


def _transpose(node, cut, shp, ctx):
    x = shp(node.input[0])
    if x is None:
        return None
    perm = ctx.attr(node, "perm", list(range(len(x)))[::-1])
    return [(perm[cut[0]], cut[1], cut[2])]


def _regrouped(node, cut, shp, ctx):
    """Reshape, Flatten, Squeeze, Unsqueeze: the same elements in a new shape. Output axis a, of
    extent n with `inner` elements a step, is input axis b with the same elements before it when b
    has extent n (the same rows), or n f with its other f factors the output axes after a (rows
    times f), or when a merges b with axes after it of g elements together and the cut is whole
    groups of g."""
    a, s, e = cut
    x, y = shp(node.input[0]), shp(node.output[0])
    if x is None or y is None:
        return None
    if node.op_type == "Squeeze" and len(node.input) < 2 and not node.attribute and e - s == 1:
        return None  # squeezing every axis of extent 1 would squeeze the cut one too
    before = math.prod(y[:a])
    # the input axis with the same elements before it; not one of extent 1 (the cut one holds more)
    b = next((i for i in range(len(x)) if math.prod(x[:i]) == before and x[i] != 1), None)
    if b is None:
        return None
    n, m = y[a], x[b]
    rest = [None] * (len(node.input) - 1)
    if m == n:
        return [(b, s, e)] + rest
    if m % n == 0:  # input axis b is output axes a, a+1, ... together
        f = m // n
        if any(math.prod(y[a + 1:k]) == f for k in range(a + 1, len(y) + 1)):
            return [(b, s * f, e * f)] + rest
        return None
    g = next((math.prod(x[b + 1:k]) for k in range(b + 1, len(x) + 1) if math.prod(x[b:k]) == n), None)
    if g is None or s % g or e % g:
        return None
    return [(b, s // g, e // g)] + rest


def _gather(node, cut, shp, ctx):
    """Gather with constant indices on another axis: the cut is on the data's matching axis."""
    x = shp(node.input[0])
    idx = ctx.consts.get(node.input[1])
    if x is None or idx is None:
        return None
    g = ctx.attr(node, "axis", 0) % len(x)
    a, s, e = cut
    if a < g:
        return [(a, s, e), None]
    if a >= g + idx.ndim:
        return [(a - idx.ndim + 1, s, e), None]
    return None


def _concat(node, cut, shp, ctx):
    out = shp(node.output[0])
    if out is None or cut[0] == ctx.attr(node, "axis", 0) % len(out):
        return None
    return [cut] * len(node.input)


_RULES: dict[str, Callable] = {
    **{op: _elementwise for op in _ELEMENTWISE}, **{op: _regrouped for op in _REGROUPING},
    "LayerNormalization": _normalization, "Softmax": _softmax, "LogSoftmax": _softmax,
    "MatMul": _matmul, "Gemm": _gemm, "Transpose": _transpose, "Gather": _gather, "Concat": _concat,
}


class _Context:
    def __init__(self, consts: dict, opset: int):
        self.consts, self.opset = consts, opset

    @staticmethod
    def attr(node, name, default):
        return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _wrapped(idx: np.ndarray, n: int) -> np.ndarray:
    """Gather's indices into an axis of n, negative ones counted from its end."""
    return np.where(idx < 0, idx + n, idx)


def _clamped(v: int, n: int) -> int:
    """A Slice bound on an axis of n as Slice reads it (steps 1): from the end when negative, in [0, n]."""
    return min(max(v + n if v < 0 else v, 0), n)


def _seed_cut(node, shp, ctx):
    """The cut a Gather of constant indices or a Slice of constant bounds (steps 1) reads, if it
    reads fewer rows of its input along one axis than there are."""
    x = shp(node.input[0]) if node.input else None
    if x is None or not x:
        return None
    if node.op_type == "Gather":
        idx = ctx.consts.get(node.input[1])
        if idx is None or idx.size == 0 or idx.dtype.kind not in "iu":
            return None
        a = ctx.attr(node, "axis", 0) % len(x)
        i = _wrapped(idx, x[a])
        if i.min() < 0 or i.max() >= x[a]:
            return None  # out of range: left to the Gather's own error
        s, e = int(i.min()), int(i.max()) + 1
        return (a, s, e) if e - s < x[a] else None
    if node.op_type == "Slice" and len(node.input) >= 3:
        names = (list(node.input[1:5]) + [""] * 4)[:4]  # starts, ends, axes, steps ("": not given)
        bounds = [ctx.consts.get(n) if n else None for n in names]
        if any(n and v is None for n, v in zip(names, bounds)):
            return None  # a bound computed in the graph
        starts, ends, axes, steps = bounds
        if steps is not None and np.any(steps != 1):
            return None
        axes = np.arange(len(starts)) if axes is None else axes
        best = None
        for ax, s, e in zip(axes.tolist(), starts.tolist(), ends.tolist()):
            ax %= len(x)
            n = x[ax]
            s, e = _clamped(s, n), _clamped(e, n)
            if s < e and (s, e) != (0, n):
                if best is None or e - s < best[2] - best[1]:
                    best = (ax, s, e)
        return best
    return None


def static_shapes(proto, input_shapes: dict, small: int = 64) -> dict:
    """name -> shape for every value whose shape onnx's shape inference fixes, given the graph
    inputs' shapes. Only small initializers (shapes, indices) travel with the graph it infers on."""
    g = proto.graph
    inits = [t for t in g.initializer if math.prod(t.dims) <= small]
    kept = {t.name for t in inits}
    decls = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
             for t in g.initializer if t.name not in kept]
    inputs = [helper.make_tensor_value_info(vi.name, vi.type.tensor_type.elem_type, list(input_shapes[vi.name]))
              for vi in g.input if vi.name in input_shapes]
    m = helper.make_model(helper.make_graph(g.node, g.name, inputs + decls, [], inits),
                          opset_imports=proto.opset_import, ir_version=proto.ir_version)
    m = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    shapes = {n: tuple(s) for n, s in input_shapes.items()}
    shapes.update((t.name, tuple(t.dims)) for t in g.initializer)
    for vi in m.graph.value_info:
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    return shapes


def _constant_node(name: str, value: np.ndarray):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def has_seed(nodes) -> bool:
    """Whether any node could start a cut (a cheap test before shape inference)."""
    return any(n.op_type in ("Gather", "Slice") and n.domain in ("", "ai.onnx") for n in nodes)


def narrow(graph, shapes: dict, consts: dict, opset: int) -> NarrowedGraph | None:
    """The graph with every value computed only for the rows its readers use (module docstring), or
    None when no node other than a reshape or transpose would compute fewer rows. `shapes`:
    static_shapes; `consts`: the values of initializers and Constant nodes, by name."""
    nodes, outputs = list(graph.node), {o.name for o in graph.output}
    ctx = _Context(consts, opset)
    shp = shapes.get
    readers = defaultdict(list)  # value -> [(node index, input slot)]
    for i, n in enumerate(nodes):
        for j, name in enumerate(n.input):
            if name:
                readers[name].append((i, j))
    wanted = {}  # (node index, slot) -> the cut that node reads of that input
    seeds = {}
    for i, n in enumerate(nodes):
        if n.domain in ("", "ai.onnx"):
            cut = _seed_cut(n, shp, ctx)
            if cut is not None:
                seeds[i] = wanted[(i, 0)] = cut

    def shape_only(i):
        return nodes[i].op_type in ("Shape", "Size") and nodes[i].domain in ("", "ai.onnx")

    narrowed = {}  # node index -> the cut of its output it computes
    for i in reversed(range(len(nodes))):
        n = nodes[i]
        rule = _RULES.get(n.op_type) if n.domain in ("", "ai.onnx") else None
        if rule is None or i in seeds or len(n.output) != 1 or n.output[0] in outputs or shp(n.output[0]) is None:
            continue
        asked = {wanted.get(r) for r in readers[n.output[0]] if not shape_only(r[0])}
        if len(asked) != 1 or None in asked:
            continue
        cut = asked.pop()
        cuts = rule(n, cut, shp, ctx)
        if cuts is None:
            continue
        narrowed[i] = cut
        for j, c in enumerate(cuts):
            if c is not None:
                wanted[(i, j)] = c
    if all(nodes[i].op_type in _VIEWS for i in narrowed):
        return None
    cuts = {nodes[i].output[0]: cut for i, cut in narrowed.items()}
    expected = {name: shapes[name][:a] + (e - s,) + shapes[name][a + 1:] for name, (a, s, e) in cuts.items()}
    expected.update((nodes[i].output[0], shapes[nodes[i].output[0]]) for i in seeds
                    if nodes[i].input[0] in cuts and nodes[i].output[0] in shapes)  # as before narrowing
    return NarrowedGraph(_rewrite(nodes, narrowed, seeds, wanted, shapes, consts, shape_only), list(graph.output), cuts,
                 expected)


def _rewrite(nodes, narrowed, seeds, wanted, shapes, consts, shape_only) -> list:
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    taken = {name for n in nodes for name in list(n.input) + list(n.output)}

    def fresh(base):
        k = 0
        while f"{base}.{k}" in taken:
            k += 1
        taken.add(f"{base}.{k}")
        return f"{base}.{k}"

    def is_cut(name):  # a value whose producer computes only the cut rows
        return producer.get(name) in narrowed

    out, slices = [], {}  # (value, cut) -> the name of its Slice
    for i, n in enumerate(nodes):
        if shape_only(i) and is_cut(n.input[0]):  # the shape it read was the whole value's
            full = np.array(shapes[n.input[0]], np.int64)
            if n.op_type == "Size":
                out.append(_constant_node(n.output[0], np.array(full.prod(), np.int64)))
            else:
                start, end = _Context.attr(n, "start", 0), _Context.attr(n, "end", None)
                out.append(_constant_node(n.output[0], full[start:end]))
            continue
        if i in seeds:
            if is_cut(n.input[0]):
                out.extend(_reseeded(n, seeds[i], shapes[n.input[0]], consts, fresh))
            else:
                out.append(n)
            continue
        if i not in narrowed:
            out.append(n)
            continue
        ins = list(n.input)
        for j, name in enumerate(ins):
            c = wanted.get((i, j))
            if c is None or is_cut(name):
                continue
            if (name, c) not in slices:
                slices[(name, c)] = fresh(f"{name}.rows")
                bounds = [fresh(f"{name}.rows.{w}") for w in ("starts", "ends", "axes")]
                for b, v in zip(bounds, (c[1], c[2], c[0])):
                    out.append(_constant_node(b, np.array([v], np.int64)))
                out.append(helper.make_node("Slice", [name] + bounds, [slices[(name, c)]]))
            ins[j] = slices[(name, c)]
        if n.op_type == "Reshape":
            a, s, e = narrowed[i]
            target = list(shapes[n.output[0]])
            target[a] = e - s
            ins[1] = fresh(f"{n.output[0]}.shape")
            out.append(_constant_node(ins[1], np.array(target, np.int64)))
        m = onnx.NodeProto()
        m.CopyFrom(n)
        del m.input[:]
        m.input.extend(ins)
        out.append(m)
    return out


def _reseeded(node, cut, shape, consts, fresh) -> list:
    """A seed Gather or Slice that reads the cut rows of its input (of `shape` before the cut): its
    indices on the cut's axis shifted by the cut's start. Returns the new constants and the node."""
    a, s, _ = cut
    m = onnx.NodeProto()
    m.CopyFrom(node)
    if node.op_type == "Gather":
        idx = consts[node.input[1]]
        shifted = {1: _wrapped(idx, shape[a]) - s}
    else:
        starts, ends = consts[node.input[1]].copy(), consts[node.input[2]].copy()
        given = len(node.input) > 3 and node.input[3]
        axes = consts[node.input[3]] if given else np.arange(len(starts))
        for k, ax in enumerate(axes.tolist()):
            if ax % len(shape) == a:  # the cut's axis: its bounds clamped as Slice does, then shifted
                starts[k] = _clamped(int(starts[k]), shape[a]) - s
                ends[k] = _clamped(int(ends[k]), shape[a]) - s
        shifted = {1: starts, 2: ends}
    made = []
    for j, v in shifted.items():
        m.input[j] = fresh(f"{node.input[j]}.shifted")
        made.append(_constant_node(m.input[j], v.astype(consts[node.input[j]].dtype)))
    return made + [m]
