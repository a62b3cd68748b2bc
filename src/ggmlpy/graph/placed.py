"""A graph's context and its placement, owned together."""
from __future__ import annotations

from .._sigint import uninterruptible
from .compiled import CompiledGraph
from .graph_context import GraphContext


class PlacedGraph:
    """A GraphContext of `capacity` headers and one graph of `n_nodes` slots (capacity by default),
    and, once built, its CompiledGraph (`place`). `free` frees both, the placement first: its
    buffers hold the context's tensors. Subclasses (the eager executor's cached graphs,
    eager_numpy's one-op plans) add what they bind and read."""

    __slots__ = ("gctx", "run")

    def __init__(self, capacity: int, n_nodes: int | None = None):
        self.run = None
        self.gctx = GraphContext(capacity, n_nodes=capacity if n_nodes is None else n_nodes)

    def place(self, backend, nodes=None, **options) -> CompiledGraph:
        """Place the built graph on `backend` (CompiledGraph's options); raises when a kernel is missing."""
        self.run = CompiledGraph(self.gctx.graph, backend, self.gctx.nodes() if nodes is None else nodes, **options)
        return self.run

    @uninterruptible
    def free(self) -> None:  # also of one whose __init__ raised half-way: only what was made
        if getattr(self, "run", None) is not None:
            self.run.free()
            self.run = None
        if getattr(self, "gctx", None) is not None:
            self.gctx.free()
            self.gctx = None

    __del__ = free
