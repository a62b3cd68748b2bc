"""The split states of ggml's meta backend, and the checks that keep it from aborting.

ggml's meta backend (0.25.3) aborts the process on an inconsistent split, and on graphs and data
accesses it has no rule for. This module validates split states and follows ggml's split-state
rules for the ops listed in `_GENERIC`, `_BIN_BCAST`, `_PER_ROW`, `_SAME_AS_SRC` and mul_mat, so
that contexts (data accesses), graph allocators and backends can refuse with a GGMLError first.
It knows the meta devices only through the registry below (meta_backend.py makes and registers
them), so it sits below every module that reads, writes or computes.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..bindings import ffi, lib
from ..errors import GGMLError

if TYPE_CHECKING:
    from .meta_backend import MetaDevice

_NULL = ffi.NULL
MAX_DEVICES = 16          # GGML_BACKEND_META_MAX_DEVICES
MAX_SEGMENTS = 16         # the length of the struct's nr[]

GGML_BACKEND_SPLIT_AXIS_0 = 0
GGML_BACKEND_SPLIT_AXIS_1 = 1
GGML_BACKEND_SPLIT_AXIS_2 = 2
GGML_BACKEND_SPLIT_AXIS_3 = 3
GGML_BACKEND_SPLIT_AXIS_MIRRORED = 10
GGML_BACKEND_SPLIT_AXIS_PARTIAL = 11
GGML_BACKEND_SPLIT_AXIS_NONE = 98
GGML_BACKEND_SPLIT_AXIS_UNKNOWN = 99
MIRRORED, PARTIAL = GGML_BACKEND_SPLIT_AXIS_MIRRORED, GGML_BACKEND_SPLIT_AXIS_PARTIAL
_AXIS_WORDS = {"mirrored": MIRRORED, "partial": PARTIAL}

# Every meta device made in this process, by device address. ggml keeps a meta device (and the
# callback pointer it holds) until the process ends, so the Python callback must live as long.
_DEVICES: dict = {}  # device address -> meta_backend.MetaDevice

# Buffer types of meta devices: a meta buffer over host devices reports itself as host memory,
# but its tensors' data pointers are placeholders, not memory (context.on_meta, meta_check).
META_BUFTS: set = set()


def _addr(p) -> int:
    return int(ffi.cast("uintptr_t", p))


class SplitState(tuple):
    """A validated split state: (axis, ne, nr); ne has n_segments * n_devs entries."""

    __slots__ = ()

    def __new__(cls, axis: int, ne=(), nr=(1,)):
        return super().__new__(cls, (int(axis), tuple(int(v) for v in ne), tuple(int(v) for v in nr)))

    axis = property(lambda self: self[0], doc="the split axis (0..3, MIRRORED or PARTIAL)")
    ne = property(lambda self: self[1], doc="per segment and device, the slice sizes along the axis")
    nr = property(lambda self: self[2], doc="per segment, how often it repeats")

    @property
    def is_split(self) -> bool:
        """True when the tensor is cut along one of its dims."""
        return 0 <= self[0] < 4

    def per_device(self, n_devs: int) -> list:
        """Each device's share of the split axis (segments and repeats summed)."""
        ne = self.ne + (0,) * (len(self.nr) * n_devs - len(self.ne))  # unsplit states carry no sizes: zeros
        return [sum(ne[s * n_devs + j] * self.nr[s] for s in range(len(self.nr))) for j in range(n_devs)]


_MIRRORED = SplitState(MIRRORED)


def _tensor_info(t) -> dict:
    """What ggmlR's split_fn receives about a tensor (ggmlR's field names)."""
    return {"name": ffi.string(t.name).decode(errors="replace"), "type": int(t.type),
            "ne": tuple(int(t.ne[i]) for i in range(4)), "op": int(t.op), "flags": int(t.flags)}


def _even(n: int, n_devs: int, granularity: int) -> list:
    """n split as evenly as possible in multiples of `granularity` (the first devices get more)."""
    blocks = n // granularity
    return [(blocks // n_devs + (j < blocks % n_devs)) * granularity for j in range(n_devs)]


def _ints(v, what) -> list:
    if isinstance(v, (str, bytes)):
        raise GGMLError(f"{what} must be numbers, got {v!r}")
    try:
        vals = list(v) if hasattr(v, "__iter__") else [v]
    except TypeError:
        raise GGMLError(f"{what} must be numbers, got {type(v).__name__}") from None
    out = []
    for x in vals:
        if isinstance(x, bool) or not float(x).is_integer():
            raise GGMLError(f"{what} must be whole numbers, got {x!r}")
        out.append(int(x))
    return out


def _parse_axis(a) -> int:
    if isinstance(a, str):
        w = a.strip().lower()
        if w in _AXIS_WORDS:
            return _AXIS_WORDS[w]
        if w.isdigit():
            return int(w)
        raise GGMLError(f"unknown split axis {a!r} (0..3, 'mirrored' or 'partial')")
    if isinstance(a, bool):
        raise GGMLError(f"the split axis must be a number, got {a!r}")
    return _ints([a], "axis")[0]


def split_state(spec, info: dict, n_devs: int) -> SplitState:
    """Check and normalise what a split function answered for the tensor described by `info`.

    `spec` is None or "mirrored" (a full copy on each device), an axis (0..2: an even split
    along it), "partial", ggmlR's dict {"axis", "ne", "n_segments"} (plus ggml's "nr"), or a
    tuple (axis, ne). Raises GGMLError for anything ggml's meta backend would abort on."""
    name = info["name"] or "<unnamed>"
    if spec is None:
        return _MIRRORED
    if isinstance(spec, SplitState):
        spec = {"axis": spec.axis, "ne": spec.ne, "nr": spec.nr, "n_segments": len(spec.nr)}
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"axis", "ne", "n_segments", "nr"}
        if unknown:
            raise GGMLError(f"split state for '{name}': unknown fields {sorted(unknown)}")
        if "axis" not in spec:
            raise GGMLError(f"split state for '{name}' has no 'axis'")
        axis, ne, nseg, nr = (_parse_axis(spec["axis"]), spec.get("ne"), spec.get("n_segments"), spec.get("nr"))
    elif isinstance(spec, tuple) and len(spec) == 2:
        axis, ne, nseg, nr = _parse_axis(spec[0]), spec[1], None, None
    else:
        axis, ne, nseg, nr = _parse_axis(spec), None, None, None
    if axis == MIRRORED:
        return _MIRRORED
    if axis == PARTIAL:
        if info["type"] != lib.GGML_TYPE_F32:
            raise GGMLError(f"split state for '{name}': PARTIAL needs an f32 tensor (ggml's meta buffer)")
        if (nseg not in (None, 1)) or (nr is not None and _ints(nr, "nr") != [1]):
            raise GGMLError(f"split state for '{name}': PARTIAL has one segment, repeated once")
        mask = [0] * n_devs if ne is None else _ints(ne, "ne")
        if len(mask) != n_devs or any(v < 0 for v in mask):
            raise GGMLError(f"split state for '{name}': PARTIAL's ne is a contributor mask of {n_devs} "
                            f"non-negative numbers, got {mask}")
        return SplitState(PARTIAL, mask, (1,))
    if axis == 3:
        raise GGMLError(f"split state for '{name}': ggml 0.25.3's meta buffer cannot write or read a "
                        "tensor split along axis 3")
    if axis not in (0, 1, 2):
        raise GGMLError(f"split state for '{name}': axis {axis} is not 0..2, MIRRORED (10) or PARTIAL (11)")
    n = info["ne"][axis]
    if n < 2:  # ggml then keeps every slice's strides whole, and writes past the slices
        raise GGMLError(f"split state for '{name}': ne[{axis}] is {n}; ggml's meta buffer cannot split a "
                        "dim of size 1 (mirror the tensor or split another axis)")
    granularity = int(lib.ggml_blck_size(info["type"])) if axis == 0 else 1
    nseg = 1 if nseg is None else _ints([nseg], "n_segments")[0]
    if not 1 <= nseg <= MAX_SEGMENTS:
        raise GGMLError(f"split state for '{name}': n_segments must be in 1..{MAX_SEGMENTS}, got {nseg}")
    nr = [1] * nseg if nr is None else _ints(nr, "nr")
    if len(nr) != nseg or any(r < 1 for r in nr):
        raise GGMLError(f"split state for '{name}': nr needs {nseg} repeat counts >= 1, got {nr}")
    if ne is None:
        if nseg != 1 or nr != [1]:
            raise GGMLError(f"split state for '{name}': give ne for a split in {nseg} segments")
        ne = _even(n, n_devs, granularity)
    ne = _ints(ne, "ne")
    if len(ne) != nseg * n_devs:
        raise GGMLError(f"split state for '{name}': ne needs n_segments * n_devs = {nseg * n_devs} entries, "
                        f"got {len(ne)}")
    if any(v < 0 or v % granularity for v in ne):
        raise GGMLError(f"split state for '{name}': the slices {ne} must be non-negative multiples of "
                        f"{granularity} (the type's block size)")
    total = sum(ne[s * n_devs + j] * nr[s] for s in range(nseg) for j in range(n_devs))
    if total != n:
        raise GGMLError(f"split state for '{name}': the slices add up to {total}, but ne[{axis}] is {n} "
                        "(the sizes do not match)")
    if nseg > 1 or nr != [1]:
        ne_ = info["ne"]
        if axis not in (0, 1) or ne_[3] != 1 or (axis == 0 and ne_[2] != 1):
            raise GGMLError(f"split state for '{name}': ggml's meta buffer reads and writes segmented "
                            "tensors only when split along axis 0 (ne2 = ne3 = 1) or 1 (ne3 = 1)")
    return SplitState(axis, ne, nr)


def _state_struct(st: SplitState):
    r = ffi.new("struct ggml_backend_meta_split_state *")
    r.axis = st.axis
    for i, v in enumerate(st.ne):
        r.ne[i] = v
    for i, v in enumerate(st.nr):
        r.nr[i] = v
    r.n_segments = len(st.nr)
    return r[0]


# -- split states of graphs and data accesses ------------------------------------------------------------
# The subset of ggml's split-state rules (ggml-backend-meta.cpp) that ggmlpy follows; graphs with
# other ops are refused. PARTIAL (per-device partial sums) only passes through linear ops.
def _ops(*names):
    return frozenset(int(getattr(lib, "GGML_OP_" + n)) for n in names)


_ELEMENTWISE = _ops("UNARY", "SCALE", "SQR", "SQRT", "LOG", "SIN", "COS", "CLAMP", "LEAKY_RELU")
_LINEAR = _ops("SCALE", "ADD", "SUB", "SUM", "SUM_ROWS", "MEAN")
_BIN_BCAST = _ops("ADD", "SUB", "MUL", "DIV")
_PER_ROW = _ops("SUM_ROWS", "MEAN", "ARGMAX", "NORM", "RMS_NORM", "L2_NORM")
_SCALAR_ONLY = _ops("SUM")
_SAME_AS_SRC = _ops("RESHAPE", "VIEW", "PERMUTE", "TRANSPOSE", "CONT")
_MUL_MAT = int(lib.GGML_OP_MUL_MAT)
_NONE = int(lib.GGML_OP_NONE)


def _name(p) -> str:
    return ffi.string(p.name).decode(errors="replace") or "<unnamed>"


def _op(p) -> str:
    return ffi.string(lib.ggml_op_desc(p)).decode()


def device_of_buffer(buf):
    """The MetaDevice whose buffer `buf` (a ggml buffer pointer) is, or None."""
    if buf == _NULL or not META_BUFTS:
        return None
    buft = lib.ggml_backend_buffer_get_type(buf)
    if _addr(buft) not in META_BUFTS:
        return None
    return _DEVICES.get(_addr(lib.ggml_backend_buft_get_device(buft)))


def _equal(a: SplitState, b: SplitState, n_devs: int) -> bool:
    return a.axis == b.axis and a.per_device(n_devs) == b.per_device(n_devs)


class _Propagation:
    """Split states of the tensors of graphs on one meta device, following ggml's rules."""

    def __init__(self, dev: MetaDevice):
        self.dev, self.n, self.memo = dev, dev.n_devs, {}

    def fail(self, p, why: str):
        raise GGMLError(f"meta backend ({self.dev.name}): tensor '{_name(p)}' ({_op(p)}): {why}")

    def state(self, root, sync: bool = True) -> SplitState:
        """root's split state; `sync` is ggml's assume_sync (False: as read back or written)."""
        order, stack, seen = [], [(root, False)], set()
        while stack:  # post-order over the sources, without recursion
            p, done = stack.pop()
            a = _addr(p)
            if done:
                order.append(p)
                continue
            if a in self.memo or a in seen:
                continue
            seen.add(a)
            stack.append((p, True))
            if not self._is_weight(p):
                stack += [(p.src[i], False) for i in range(10) if p.src[i] != _NULL and p.src[i] != p]
        for p in order:
            if _addr(p) not in self.memo:
                self.memo[_addr(p)] = self._rule(p, True)
        if not sync and root.op == _MUL_MAT:
            return self._rule(root, False)
        return self.memo[_addr(root)]

    def _is_weight(self, p) -> bool:
        # ggml asks the callback for tensors in a non-compute buffer that are not views
        return (p.buffer != _NULL and p.view_src == _NULL and
                int(lib.ggml_backend_buffer_get_usage(p.buffer)) != lib.GGML_BACKEND_BUFFER_USAGE_COMPUTE)

    def _rule(self, p, sync: bool) -> SplitState:
        if p.buffer != _NULL and device_of_buffer(p.buffer) is not self.dev:
            self.fail(p, "is not in a buffer of this meta device (allocate every tensor of the graph on it)")
        if self._is_weight(p):
            return self.dev.decide(p)
        if p.op == _NONE:
            return _MIRRORED
        src = [p.src[i] for i in range(10) if p.src[i] != _NULL and p.src[i] != p]
        ss = [self.memo[_addr(s)] for s in src]
        for s, st in zip(src, ss):
            if len(st.nr) != 1 or st.nr[0] != 1:
                self.fail(p, f"its source '{_name(s)}' is split in segments; ggmlpy computes graphs over "
                             "one-segment splits only")
        if PARTIAL in (st.axis for st in ss) and p.op not in _LINEAR:
            self.fail(p, "a source holds per-device partial sums (PARTIAL), which only linear ops "
                         "(scale, add, sub, sum, sum_rows, mean) may take")
        op = int(p.op)
        if op == _MUL_MAT:
            st = self._mul_mat(p, ss[0], ss[1], sync)
        elif op in _SAME_AS_SRC:
            if ss[0].is_split:
                self.fail(p, f"a view or reshape of a tensor split along axis {ss[0].axis}; ggmlpy only "
                             "checks views of mirrored tensors on a meta device")
            st = ss[0]
        elif op in _PER_ROW:
            if ss[0].axis == 0:
                self.fail(p, "a per-row op over a tensor split along axis 0 (ggml's meta backend aborts)")
            st = ss[0]
        elif op in _BIN_BCAST:
            st = self._bin_bcast(p, ss)
        elif op in _ELEMENTWISE or op in _SCALAR_ONLY:
            st = self._generic(p, ss, op in _SCALAR_ONLY)
        else:
            self.fail(p, "ggmlpy has no split-state rule for this op on a meta device "
                         "(mul_mat, element-wise ops, add/sub/mul/div, row reductions, norms)")
        return self._ratio(p, st, src, ss) if st.is_split else st

    def _generic(self, p, ss, scalar_only):
        st = ss[0]
        if any(not _equal(o, st, self.n) for o in ss[1:]):
            self.fail(p, "its sources are split differently (ggml's meta backend aborts)")
        if scalar_only and st.is_split:
            self.fail(p, f"this op needs its source whole, not split along axis {st.axis}")
        return st

    def _bin_bcast(self, p, ss):
        a, b = ss[0], ss[1]
        if a.is_split and int(p.src[1].ne[a.axis]) == 1 and b.axis == MIRRORED:
            return a
        return self._generic(p, ss, False)

    def _mul_mat(self, p, a, b, sync):
        if a.axis == MIRRORED and b.axis == MIRRORED:
            return _MIRRORED
        if a.axis == 1 and b.axis == MIRRORED:
            return SplitState(0, a.ne, (1,))
        if b.axis == 1 and a.axis == MIRRORED:
            return b
        if a.axis == 0 and b.axis == 0:
            if not _equal(a, b, self.n):
                self.fail(p, "both operands are split along axis 0 (ne0, the shared dim), but not alike")
            if 0 in a.per_device(self.n):  # its empty product is never written: garbage joins the sum
                self.fail(p, f"split along the shared dim as {a.per_device(self.n)}: every device needs a "
                             "part of it (a device with none adds an unwritten partial sum)")
            return _MIRRORED if sync else SplitState(PARTIAL, [0] * self.n)
        if a.axis == b.axis and a.axis in (2, 3):
            if not _equal(a, b, self.n):
                self.fail(p, f"both operands are split along axis {a.axis}, but not alike")
            return a
        if a.axis in (2, 3) and b.axis == MIRRORED:
            return a
        self.fail(p, f"ggml's meta backend cannot multiply src0 {_axis_text(a.axis)} by src1 "
                     f"{_axis_text(b.axis)}: split src0 along axis 1 (rows of the result), src1 along "
                     "axis 1 (its columns), or both along axis 0 (the shared dim)")

    def _ratio(self, p, st, src, ss):
        """ggml derives a split result's per-device sizes from its first split source."""
        out, first = None, True
        for s, sst in zip(src, ss):
            if not sst.is_split:
                continue
            share = sst.per_device(self.n)
            if first:
                num = [v * int(p.ne[st.axis]) for v in share]
                den = int(s.ne[sst.axis])
                if any(v % den for v in num) if den else any(num):
                    self.fail(p, "its split sizes do not scale evenly from its source's")
                out = SplitState(st.axis, [v // den if den else 0 for v in num], (1,))
                first = False
            elif any(o * int(s.ne[sst.axis]) != v * int(p.ne[st.axis]) for o, v in zip(out.ne, share)):
                self.fail(p, "its sources are split in different proportions")
        if out is None:
            self.fail(p, "a split result without a split source")
        return out


def _axis_text(a: int) -> str:
    return {MIRRORED: "mirrored", PARTIAL: "holding partial sums"}.get(a, f"split along axis {a}")


def check_graph(graph, dev_ptr, allocating: bool = False) -> None:
    """Raise GGMLError where ggml's meta backend would abort computing (or, `allocating`,
    graph-allocating) `graph` on the meta device at dev_ptr."""
    dev = _DEVICES.get(_addr(dev_ptr))
    if dev is None:
        raise GGMLError("this meta device was not made by ggmlpy's ggml_backend_meta_device")
    if getattr(graph, "grads", False):
        raise GGMLError("ggml's meta backend cannot compute a graph made with grads=True")
    prop = _Propagation(dev)
    for p in graph.leafs + graph.nodes:
        prop.state(p)
    for p in graph.leafs + graph.nodes:
        if p.buffer == _NULL and p.view_src == _NULL and not (allocating and p.op != _NONE):
            raise GGMLError(f"meta backend ({dev.name}): tensor '{_name(p)}' is not allocated; allocate the "
                            "weights with ggml_backend_alloc_ctx_tensors and the graph with a graph "
                            "allocator of the meta backend")


def check_access(t, what: str, offset: int = 0, size: int | None = None, write: bool = False) -> None:
    """Raise GGMLError for a read or write of bytes offset..offset+size of tensor t (a Tensor or
    pointer) that ggml's meta buffer would abort on. A no-op for tensors of other buffers."""
    p = getattr(t, "ptr", t)
    dev = device_of_buffer(p.buffer)
    if dev is None:
        return
    size = int(lib.ggml_nbytes(p)) - offset if size is None else size
    st = _Propagation(dev).state(p, sync=False)
    if st.axis == PARTIAL and not write:
        raise GGMLError(f"{what}: tensor '{_name(p)}' holds per-device partial sums (PARTIAL) on {dev.name}; "
                        "ggml's meta buffer cannot read them back: add an op after it (for example "
                        "ggml_scale by 1) and read that")
    if st.is_split:
        segmented = len(st.nr) != 1 or st.nr[0] != 1
        chunk = int(p.nb[1] if segmented and st.axis == 0 else p.nb[2] if segmented else p.nb[st.axis + 1])
        if offset % chunk or size % chunk:
            raise GGMLError(f"{what}: tensor '{_name(p)}' is split along axis {st.axis} on {dev.name}; "
                            f"read and write it in whole slices of {chunk} bytes (offset {offset}, size {size})")
