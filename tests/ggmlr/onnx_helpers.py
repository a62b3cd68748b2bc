"""ggmlR's helper-onnx.R, with onnx.helper instead of a hand-written protobuf writer.

Same models: graph "test", IR version 7, opset 13, inputs and outputs named as in R.
R feeds flat vectors (ONNX's row-major order) and compares flat results: `run_onnx`
does the same, reshaping the vectors to the declared input shapes.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import ggmlpy as g


def vi(name, dims, elem=T.FLOAT):
    return helper.make_tensor_value_info(name, elem, list(dims))


def model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(inits))
    return helper.make_model(graph, ir_version=7, opset_imports=[helper.make_opsetid("", 13)])


def init(name, dims, data, elem=T.FLOAT):
    dt = {T.FLOAT: np.float32, T.INT64: np.int64}[elem]
    return numpy_helper.from_array(np.asarray(data, dtype=dt).reshape(dims), name)


def make_unary(op, dims=(1, 4), attrs=None):
    return model([helper.make_node(op, ["X"], ["Y"], **(attrs or {}))], [vi("X", dims)], [vi("Y", dims)])


def make_binary(op, dims_a=(1, 4), dims_b=None, dims_out=None, attrs=None):
    dims_b = dims_a if dims_b is None else dims_b
    dims_out = dims_a if dims_out is None else dims_out
    return model([helper.make_node(op, ["A", "B"], ["Y"], **(attrs or {}))], [vi("A", dims_a), vi("B", dims_b)],
                 [vi("Y", dims_out)])


def make_chain(op1, op2, dims=(1, 4)):
    return model([helper.make_node(op1, ["X"], ["tmp"]), helper.make_node(op2, ["tmp"], ["Y"])],
                 [vi("X", dims)], [vi("Y", dims)])


def make_gemm(M=2, K=3, N=4, transA=0, transB=0, weight_data=None, bias_data=None):
    w = np.ones(K * N) if weight_data is None else weight_data
    inits = [init("B", (K, N), w)]
    ins = [vi("A", (M, K)), vi("B", (K, N))]
    names = ["A", "B"]
    if bias_data is not None:
        inits.append(init("C", (N,), bias_data))
        ins.append(vi("C", (N,)))
        names.append("C")
    node = helper.make_node("Gemm", names, ["Y"], transA=transA, transB=transB)
    return model([node], ins, [vi("Y", (M, N))], inits)


def run_onnx(m, inputs, device="cpu"):
    """Load, run, and return the first output flattened (R's as.numeric(result))."""
    loaded = g.onnx_load(m, device=device)
    shapes = g.onnx_inputs(loaded)
    feeds = {k: np.asarray(v, dtype=np.float32).reshape(shapes[k]) for k, v in inputs.items()}
    out = g.onnx_run(loaded, feeds)
    return np.asarray(out[m.graph.output[0].name], dtype=np.float64).reshape(-1)


__all__ = ["vi", "model", "init", "make_unary", "make_binary", "make_chain", "make_gemm", "run_onnx", "onnx", "T",
           "helper"]
