"""ggmlR's Sequential model: layers applied one after the other."""
from __future__ import annotations

from ..errors import GGMLError
from .layers import Embedding, Layer, ggml_to_r_shape, r_to_ggml_shape
from .model import _Model


class Sequential(_Model):
    """ggmlR's ggml_model_sequential(): layers applied in order."""

    def __init__(self, layers=()):
        super().__init__()
        self.layers: list[Layer] = []
        self.input_shape = None
        for l in layers:
            self.add(l)

    def add(self, layer: Layer):
        """Append a layer (returns the model, so calls chain)."""
        if not isinstance(layer, Layer):
            raise GGMLError(f"expected a layer, got {type(layer).__name__}")
        if not self.layers and layer.input_shape is not None and self.input_shape is None:
            self.input_shape = tuple(ggml_to_r_shape(layer.input_shape))
        if layer.auto_named:  # ggmlR numbers auto names per type within the model: dense_1, dense_2, ...
            layer.name = f"{layer.kind}_{sum(l.kind == layer.kind for l in self.layers) + 1}"
        if any(l.name == layer.name for l in self.layers):
            raise GGMLError(f"the model already has a layer named {layer.name!r}")
        self.layers.append(layer)
        self._built_for = None
        return self

    def _all_layers(self):
        return list(self.layers)

    def __repr__(self):
        if not self.layers:
            return "Sequential Model (no layers)"
        lines = ["Sequential Model", "----------------"]
        try:
            self._build()
            built = True
        except GGMLError:
            built = False
        for i, l in enumerate(self.layers, 1):
            shape = f" -> {l.output_shape}" if built else ""
            lines.append(f"  {i}. {l.name} ({l.kind}){shape}  params: {l.n_params() if built else '?'}")
        lines.append(f"Total parameters: {self.count_params() if built else '? (no input_shape yet)'}")
        lines.append("compiled" if self.compiled else "not compiled")
        return "\n".join(lines)

    def _input_specs(self):
        self._build()
        dtype = "int32" if isinstance(self.layers[0], Embedding) else "float32"
        return [(self._in_shape, dtype)]

    def _output_shapes(self):
        return [self.layers[-1].out_shape]

    def _output_layers(self):
        return [self.layers[-1]]

    def _build(self):
        if not self.layers:
            raise GGMLError("Model has no layers. Add layers before compiling.")
        first = self.layers[0]
        shape = first.input_shape or (r_to_ggml_shape(self.input_shape) if self.input_shape is not None else None)
        if shape is None:
            raise GGMLError("the first layer needs input_shape")
        key = (shape, tuple(id(l) for l in self.layers))
        if getattr(self, "_built_for", None) == key:
            return
        self._in_shape = shape
        for l in self.layers:
            shape = l.setup([shape], self._rng)
        self._built_for = key

    def _forward(self, b, xs, batch, ctx):
        h = xs[0]
        for l in self.layers:
            b.check_room()
            h = l.build(b, [h], l.tensors(b), batch, ctx)
        return [h]
