"""`onnx_lib`, the checked lib of the ONNX builders: core.checked's CheckedLib (ggml's shape rules and the room in the
context checked before each call), raising OnnxError.

The builders compute every shape themselves, so a failed check here is a builder bug; it must
still be a Python exception naming the ggml call, never an abort.
"""
from __future__ import annotations

from ..core.checked import CheckedLib, GraphFull, ShapeError
from .graph import OnnxError


class OnnxShapeError(OnnxError, ShapeError):
    """A converter passed ggml operands its op asserts on."""


class OnnxGraphFull(OnnxError, GraphFull):
    """A converter made far more ggml tensors than its node's budget."""


onnx_lib = CheckedLib(OnnxShapeError, OnnxGraphFull, prefix="internal error in ")
