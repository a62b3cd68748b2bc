"""ONNX import: run ONNX models on ggml (ggmlR's onnx_load / onnx_run / onnx_summary / onnx_inputs)."""
from .graph import OnnxError
from .model import (OnnxModel, onnx_device_info, onnx_inputs, onnx_load, onnx_profile, onnx_run, onnx_summary,
                    supported_ops)

__all__ = ["onnx_load", "onnx_run", "onnx_summary", "onnx_inputs", "onnx_profile", "onnx_device_info", "OnnxModel",
           "OnnxError"]
