"""ggmlR's Functional models: nodes (inputs, layers applied to nodes) wired into a DAG."""
from __future__ import annotations

from ..errors import GGMLError
from .layers import ggml_to_r_shape
from .model import _Model


class Node:
    """A symbolic tensor of the Functional API: an input, or a layer applied to parent nodes."""

    _ids = 0
    _inputs = 0

    def __init__(self, layer, parents, shape=None, dtype="float32", name=None):
        Node._ids += 1
        self.id = Node._ids
        self.layer = layer
        self.parents = list(parents)
        self.shape = shape    # ggml per-sample shape for inputs
        self.dtype = dtype
        if layer is None and name is None:
            Node._inputs += 1
            name = f"input_{Node._inputs}"
        self.name = name or layer.name

    @property
    def node_type(self) -> str:
        """ggmlR's node$node_type: "input" or the layer's kind."""
        return "input" if self.layer is None else self.layer.kind

    @property
    def config(self) -> dict:
        """ggmlR's node$config: the layer's settings and name (inputs: shape, dtype, name)."""
        if self.layer is None:
            return {"shape": tuple(ggml_to_r_shape(self.shape)), "dtype": self.dtype, "name": self.name}
        return {**self.layer.config, "name": self.layer.name}

    @property
    def layer_id(self) -> str | None:
        """ggmlR's node$layer_id: the applied layer's sharing key (None for an input). Nodes of one
        layer object share it, and its weights."""
        return None if self.layer is None else self.layer.layer_id

    def __repr__(self):
        return f"<Node {self.name}>"


def nn_topo_sort(outputs: Node | list) -> list:
    """ggmlR's nn_topo_sort: every node the output node(s) depend on, each once, parents before
    children (inputs first, the outputs last), in depth-first order from the first output on.
    Iterative, so a deep chain of layers does not hit Python's recursion limit."""
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    order, seen = [], set()
    for out in outs:
        if not isinstance(out, Node):
            raise GGMLError(f"nn_topo_sort: outputs must be nodes (ggml_tensor_node), got {type(out).__name__}")
        if id(out) in seen:
            continue
        seen.add(id(out))
        stack = [(out, iter(out.parents))]
        while stack:
            node, parents = stack[-1]
            nxt = next((p for p in parents if id(p) not in seen), None)
            if nxt is None:
                stack.pop()
                order.append(node)
            else:
                seen.add(id(nxt))
                stack.append((nxt, iter(nxt.parents)))
    return order


class Functional(_Model):
    """ggmlR's ggml_model(inputs, outputs): a DAG of layers; shared layer objects share weights."""

    functional = True

    def __init__(self, inputs, outputs):
        super().__init__()
        self.inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        self.outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
        for n in self.inputs:
            if not isinstance(n, Node):
                raise GGMLError(f"ggml_model: inputs must be nodes (ggml_tensor_node), got {type(n).__name__}")
            if n.layer is not None:
                raise GGMLError(f"ggml_model: input {n.name!r} has node_type {n.node_type!r}, not an "
                                "input: inputs must be ggml_input() nodes")
        self.order = self._toposort()
        self._share_by_name()
        missing = [n.name for n in self.order if n.layer is None and n not in self.inputs]
        if missing:
            raise GGMLError(f"ggml_model: the outputs depend on inputs not listed: {missing}")
        self._built = False

    def _share_by_name(self):
        """ggmlR shares weights between layers of the same name: two applications of
        ggml_layer_dense(..., name = "enc") use one weight set. Both must be the same layer."""
        by_name = {}
        for n in self.order:
            if n.layer is None:
                continue
            first = by_name.setdefault(n.layer.name, n.layer)
            if first is not n.layer:
                if first.kind != n.layer.kind or first.config != n.layer.config:
                    raise GGMLError(f"two different layers are named {n.layer.name!r} "
                                    f"({first.kind} {dict(first.config)} and {n.layer.kind} {dict(n.layer.config)})")
                n.layer = first

    def _toposort(self):
        for o in self.outputs:
            if not isinstance(o, Node):
                raise GGMLError(f"ggml_model: outputs must be nodes (ggml_tensor_node), got {type(o).__name__}")
        return nn_topo_sort(self.outputs)

    def __repr__(self):
        """Inputs, outputs and every node (parents first) with its layer kind, parents, output
        shape (R order, per sample) and parameters, as Sequential's repr lists its layers."""
        try:
            self._build()
            shapes = self._shapes
        except GGMLError:
            shapes = None
        rows = [("node", "type", "from", "output", "params")]
        for n in self.order:
            shape = "?" if shapes is None else str(tuple(ggml_to_r_shape(shapes[id(n)])))
            params = "" if n.layer is None else (str(n.layer.n_params()) if shapes is not None else "?")
            rows.append((n.name, n.node_type, ", ".join(p.name for p in n.parents), shape, params))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        table = ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        head = [f"Functional Model: {len(self.inputs)} input(s) {[n.name for n in self.inputs]}, "
                f"{len(self.outputs)} output(s) {[n.name for n in self.outputs]}"]
        head.append("-" * len(head[0]))
        total = self.count_params() if shapes is not None else "?"
        return "\n".join(head + table + [f"Total parameters: {total}",
                                         "compiled" if self.compiled else "not compiled"])

    def _all_layers(self):
        out, seen = [], set()
        for n in self.order:
            if n.layer is not None and id(n.layer) not in seen:
                seen.add(id(n.layer))
                out.append(n.layer)
        return out

    def _summary_layers(self):
        return self._all_layers()

    def _input_specs(self):
        return [(n.shape, n.dtype) for n in self.inputs]

    def _output_shapes(self):
        self._build()
        return [self._shapes[id(o)] for o in self.outputs]

    def _output_layers(self):
        return [o.layer for o in self.outputs]

    def _build(self):
        if self._built:
            return
        shapes = {}
        for n in self.order:
            if n.layer is None:
                shapes[id(n)] = n.shape
            else:
                n.layer.in_shape_cache = None
                shapes[id(n)] = self._setup(n, [shapes[id(p)] for p in n.parents])
        self._shapes = shapes
        self._built = True

    def _setup(self, n, in_shapes):
        layer = n.layer
        if layer.has_weights and layer.in_shape is not None and layer.weights and tuple(in_shapes[0]) != layer.in_shape:
            raise GGMLError(f"shared layer {layer.name!r} applied to shapes {layer.in_shape} and {in_shapes[0]}")
        return layer.setup(in_shapes, self._rng)

    def _forward(self, b, xs, batch, ctx):
        self._build()
        vals = {id(n): x for n, x in zip(self.inputs, xs)}
        tensors = {}
        for n in self.order:
            if n.layer is None:
                continue
            layer = n.layer
            b.check_room()
            # shape-dependent state (concat axes, in_shape) is per application: re-setup
            layer.setup([self._shapes[id(p)] for p in n.parents], self._rng)
            if id(layer) not in tensors:
                tensors[id(layer)] = layer.tensors(b)
            vals[id(n)] = layer.build(b, [vals[id(p)] for p in n.parents], tensors[id(layer)], batch, ctx)
        return [vals[id(o)] for o in self.outputs]

    def _fit_path(self):
        if any(getattr(l, "stochastic", False) and l.rate > 0 for l in self._all_layers()):
            return "stochastic_dropout"
        if len(self.inputs) > 1:
            return "multi_input"
        return "opt_fit"
