"""A byte-level GGUF writer for tests: every field under the test's control, bad ones included."""
import struct

import numpy as np

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
        U64: "<Q", I64: "<q", F64: "<d"}


def gguf_string(s) -> bytes:
    raw = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(raw)) + raw


def kv(key, vtype, value, etype=None) -> bytes:
    """One key-value pair; arrays take etype and a list."""
    out = gguf_string(key) + struct.pack("<I", vtype)
    if vtype == ARRAY:
        out += struct.pack("<IQ", etype, len(value))
        for v in value:
            out += gguf_string(v) if etype == STRING else struct.pack(_FMT[etype], v)
        return out
    return out + (gguf_string(value) if vtype == STRING else struct.pack(_FMT[vtype], value))


def tensor_info(name, ne, ggml_type, offset) -> bytes:
    return gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", d) for d in ne) + \
        struct.pack("<IQ", ggml_type, offset)


def build(kvs=(), tensors=(), alignment=32, magic=b"GGUF", version=3, n_kv=None, n_tensors=None,
          tail=b"") -> bytes:
    """kvs: encoded pairs (kv()); tensors: (name, ne, type, offset, data bytes). The data section
    starts at the header's end padded to `alignment`, each tensor's bytes at its offset."""
    head = magic + struct.pack("<Iqq", version, len(tensors) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(tensor_info(n, ne, t, off) for n, ne, t, off, _ in tensors)
    if tensors:
        head += b"\0" * (-len(head) % alignment)
    end = max([off + len(data) for _, _, _, off, data in tensors] + [0])
    end += -end % alignment
    data = bytearray(end)
    for _, _, _, off, blob in tensors:
        data[off:off + len(blob)] = blob
    return head + bytes(data) + tail


def f32_tensors(specs, alignment=32):
    """[(name, numpy float32 array)] -> builder tensors laid out one after another, aligned."""
    out, off = [], 0
    for name, arr in specs:
        blob = np.ascontiguousarray(arr, np.float32).tobytes()
        out.append((name, list(reversed(arr.shape)), 0, off, blob))
        off += len(blob) + (-len(blob) % alignment)
    return out
