"""Building and running whole ggml graphs, for every front end (ag_* ops, compiled steps, ONNX,
the Keras-like models).

- graph_context.py: no_alloc ggml contexts sized so that ggml never runs out of room (GraphFull
  before it would abort), and the graph they hold.
- compiled.py: a built graph placed in memory (one allocator, or ggml's scheduler across
  backends), bound to its inputs, computed, freed.
- placed.py: a GraphContext and the CompiledGraph placed from it, owned and freed together.
- cache.py: the least-recently-used cache, bounded by bytes, that keeps compiled graphs.

Everything here works on raw ggml pointers: what a tensor means (an ag tensor, an ONNX value,
a layer's output) is the front end's business.
"""
from .cache import ByteCache
from .compiled import CompiledGraph, batched_small, one_thread_is_best, unsupported_ops
from .placed import PlacedGraph
from .graph_context import TENSOR_OVERHEAD, GraphContext, GraphFull, Weights, free_context, header_context, new_context

__all__ = ["ByteCache", "CompiledGraph", "GraphContext", "GraphFull", "PlacedGraph", "TENSOR_OVERHEAD", "Weights", "batched_small",
           "free_context", "header_context", "new_context", "one_thread_is_best", "unsupported_ops"]
