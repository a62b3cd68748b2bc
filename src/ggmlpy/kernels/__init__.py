"""Fused CPU kernels (kernels.c) and products in any orientation (gemm.c, over OpenBLAS),
compiled on first use, used as ggml custom ops.

ggml's CPU `gelu_erf` calls `erff` one element at a time, and GELU's backward is a graph of a
dozen element-wise ops; kernels.c does each in one vectorised pass (docs/benchmarks.md).
gemm.c serves products that ggml_mul_mat would need a transposed copy for (see its header).
conv.c holds the ONNX importer's convolution, max pooling and linear layers (over OpenBLAS, and
with AVX2 or AVX-512 products of its own with weights packed at load) and im2col's gradient, rows.c the
importer's layer normalisation, rnn.c its LSTM (a direction's whole sequence as one node),
attention.c its scaled dot-product attention (both products and the softmax as one node).
singlecell.c is a host library (host_library): the single-cell engines' LogNormalize passes,
kNN selection and shared-nearest-neighbour graph, called from Python on numpy's buffers, not
a ggml op.
Each source is built for the best x86-64 level the CPU runs (isa_level(): x86-64-v4 takes the
AVX-512 paths, v3 the AVX2 ones; GGMLPY_KERNELS_ISA picks another, or `native`): a wheel carries
them prebuilt for every level (ggmlpy/lib/kernels/, named by a digest of their sources), and where
none matches they are compiled once per machine with the system C compiler into ggmlpy's cache
directory (keyed by the source, the compiler and its flags: `-march=native` code never runs on
another CPU); loaded with cffi. With neither, or when compiling fails, `get()`
returns None (the reason is logged once) and every op uses ggml's own kernels; without an
OpenMP or sequential OpenBLAS to link, `Kernels.gemm` is None and products stay ggml's.
`GGMLPY_KERNELS=0` turns them off; so does `set_enabled(False)` for graphs built after it.

They are C function pointers inside the graph (never a Python callback), and only graphs
for ggml's CPU backend get them: the graph builders that know the device say so through
`autograd.prims.cpu_kernels()`; graphs that ggml's own backward pass differentiates (the
Keras-like models' ggml_opt loop) are built with ggml's ops, whose nodes `adopt` (rewrite.py) then
turns into these kernels' before the graph is allocated.

- loader.py: compiling and loading (get, enabled, set_enabled, host_library, the x86-64 levels, origin)
- nodes.py: `Kernels`, a node builder per kernel, and relu, keep_nan, extremum
- rewrite.py: adopt, adopt_nodes, chain_linears, overwrites_input
"""
from .loader import (ISA_LEVELS, enabled, get, host_library, isa_level, isa_summary, origin,  # noqa: F401
                     set_enabled, supported_isa_levels)
from .nodes import (DIRECT_MAX_FLOATS, LANE_CHANNELS, Kernels, direct_fits, direct_planes, extremum,  # noqa: F401
                    gemm_fits, keep_nan, relu)
from .rewrite import adopt, adopt_nodes, chain_linears, overwrites_input  # noqa: F401

__all__ = []  # internal: nothing joins the package namespace
