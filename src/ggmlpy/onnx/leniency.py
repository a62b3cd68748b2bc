"""What onnxruntime loads though onnx's checker refuses it, where the meaning is unambiguous.

- An op declared under an opset older than the one that defines it, where onnxruntime registers the
  op under those older opsets too with the meaning of the defining one (LayerNormalization, which
  exporters wrote before opset 17 defined it). Any other op missing from its opset is refused.
- A graph input or output without a shape: an input takes the shape it is fed (or input_shapes'),
  an output's shape is computed.

The checker then validates a mended copy (those ops moved to a domain of their own, the missing
shapes present), so every other defect is still refused; the model itself is loaded as written,
with a warning naming each defect.
"""
from __future__ import annotations

import onnx
from onnx import ModelProto

# op -> the default domain's opset that defines it; onnxruntime runs it under older opsets as defined there
EARLIER_OPSETS = {"LayerNormalization": 17}
_MENDED_DOMAIN = "ggmlpy.checked_apart"


def _opset(model: ModelProto) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def defects(model: ModelProto) -> list[str]:
    """The defects onnxruntime accepts, each in words (none: the checker's refusal stands)."""
    found, opset = [], _opset(model)
    for n in model.graph.node:
        since = EARLIER_OPSETS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
        if since is not None and opset < since:
            found.append(f"{n.op_type} at node '{n.name or n.output[0]}' under opset {opset}, older than {since} "
                         f"which defines it (run as opset {since} defines it)")
    for kind, vis in (("input", model.graph.input), ("output", model.graph.output)):
        for vi in vis:
            if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
                found.append(f"graph {kind} '{vi.name}' has no shape" + (" (it takes the shape it is fed)"
                                                                        if kind == "input" else ""))
    return found


def mended(model: ModelProto) -> ModelProto:
    """A copy for the checker: ops of EARLIER_OPSETS under older opsets moved to a domain of their own
    (which the checker does not validate), missing input and output shapes present (any shape: the
    checker does not infer shapes)."""
    m = ModelProto()
    m.CopyFrom(model)
    opset, moved = _opset(m), False
    for n in m.graph.node:
        since = EARLIER_OPSETS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
        if since is not None and opset < since:
            n.domain, moved = _MENDED_DOMAIN, True
    if moved:
        m.opset_import.append(onnx.helper.make_opsetid(_MENDED_DOMAIN, 1))
    for vi in list(m.graph.input) + list(m.graph.output):
        if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
            vi.type.tensor_type.shape.SetInParent()
    return m
