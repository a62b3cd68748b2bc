"""Writing llama.cpp's files: a model (`general.type` "model") or a LoRA adapter ("adapter"), as
GGUF with metadata under llama.cpp's keys and tensors under llama.cpp's names. What goes in them
is gathered from a model by quant/llm_export.py; this module only writes and seals.

llama.cpp's loader checks each key's value type (a `*_token_id` must be uint32, a score array
float32, ...), so every value is written with the type llama.cpp reads it as (`value_type`).
Files are written atomically and carry ggmlpy's digest (`ggmlpy.digest`, io/model_file.py) over
every key and tensor: llm_load checks it when present (llama.cpp ignores the key).

Vocabularies for a model trained on characters or bytes (`char_vocab`, `byte_vocab`) are
SentencePiece-style (`tokenizer.ggml.model` "llama", the tokenizer llama-architecture files carry):
its pieces are whole characters, so a character vocabulary is written as it is, one piece per
id, multi-byte characters included (byte-level BPE without merges could only ever produce single
bytes), and its byte-fallback pieces `<0xXX>` give a byte model's 256 ids.
"""
from __future__ import annotations

import os

import numpy as np

from .._version import __version__
from ..errors import GGMLError, checked_path
from .atomic import atomic_write
from .gguf_file import GGML_MAX_NAME
from .model_file import ARCH, DIGEST_KEY, PLACEHOLDER, gguf_package, gguf_type_of, seal

# SentencePiece token types, as llama.cpp reads tokenizer.ggml.token_type
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6
SPACE = "\u2581"  # SentencePiece's "▁": llama.cpp writes a space as it before looking pieces up
_SPECIAL = {"<unk>": ("tokenizer.ggml.unknown_token_id", UNKNOWN), "<s>": ("tokenizer.ggml.bos_token_id", CONTROL),
            "</s>": ("tokenizer.ggml.eos_token_id", CONTROL)}


def value_type(key: str, value):
    """(GGUFValueType, element type or None) that llama.cpp reads `value` of `key` as."""
    T = gguf_package().GGUFValueType
    if isinstance(value, (bool, np.bool_)):
        return T.BOOL, None
    if isinstance(value, str):
        return T.STRING, None
    if isinstance(value, (int, np.integer)):
        return (T.UINT32 if 0 <= value < 2 ** 32 else T.INT64), None  # llama.cpp's counts and ids are uint32
    if isinstance(value, (float, np.floating)):
        return T.FLOAT32, None
    if isinstance(value, np.ndarray) and value.ndim == 1:
        elem = {"f4": T.FLOAT32, "f8": T.FLOAT64, "i4": T.INT32, "u4": T.UINT32, "i1": T.INT8, "u1": T.UINT8,
                "i2": T.INT16, "u2": T.UINT16, "i8": T.INT64, "u8": T.UINT64, "b1": T.BOOL}.get(value.dtype.str[1:])
        if elem is not None:
            return T.ARRAY, elem
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value):
            return T.ARRAY, T.STRING
        kinds = {value_type(key, v)[0] for v in value}
        if kinds == {T.BOOL}:
            return T.ARRAY, T.BOOL
        if kinds <= {T.UINT32, T.INT64} and all(-2 ** 31 <= v < 2 ** 31 for v in value):
            return T.ARRAY, T.INT32  # token types, as llama.cpp reads them
        if kinds <= {T.UINT32, T.INT64, T.FLOAT32}:
            return T.ARRAY, T.FLOAT32  # scores
    raise GGMLError(f"cannot write metadata {key!r} = {type(value).__name__} as a GGUF value")


def char_vocab(tokens) -> dict:
    """The tokenizer.* metadata of a character vocabulary: `tokens` the text of ids 0, 1, ...
    (a string of characters, or a list of strings). A space is written as SentencePiece's "▁";
    "<unk>", "<s>" and "</s>", where present, become llama.cpp's unknown, begin and end tokens.
    Where they are absent llama.cpp takes ids 0, 1 and 2 for them (a file cannot say "none").
    No space is added before a text, and no begin token."""
    toks = list(tokens)
    if not toks or not all(isinstance(t, str) and t for t in toks):
        raise GGMLError("llm_save: vocab must be the tokens' text, one non-empty string per id")
    pieces, types, meta = [], [], {}
    for i, t in enumerate(toks):
        key, kind = _SPECIAL.get(t, (None, NORMAL))
        if key:
            meta[key] = i
        elif len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            kind = BYTE
        pieces.append(t.replace(" ", SPACE))
        types.append(kind)
    if len(set(pieces)) != len(pieces):  # " " and "▁" are one piece
        raise GGMLError("llm_save: vocab has the same token twice (a space is written as \u2581): llama.cpp "
                        "could not tell them apart")
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": pieces,
            "tokenizer.ggml.scores": np.zeros(len(pieces), np.float32),
            "tokenizer.ggml.token_type": np.asarray(types, np.int32), **meta,
            "tokenizer.ggml.add_bos_token": False, "tokenizer.ggml.add_eos_token": False,
            "tokenizer.ggml.add_space_prefix": False}


def byte_vocab() -> dict:
    """The tokenizer.* metadata of a byte vocabulary (id = byte value, 256 ids): SentencePiece's
    byte-fallback pieces <0x00> .. <0xFF>, except the space, written as "▁" (llama.cpp turns
    every space of a text into "▁" before tokenizing, so a piece <0x20> would never be used).
    Any text tokenizes into its UTF-8 bytes. llama.cpp's begin/end/unknown ids are 1, 2, 0:
    control bytes that text does not hold."""
    return char_vocab([" " if b == 0x20 else f"<0x{b:02X}>" for b in range(256)])


def write_llm_gguf(path: str | os.PathLike, arch: str, keys: dict, tensors: list, writer: str) -> str:
    """Write a llama.cpp GGUF file atomically, sealed with ggmlpy's digest; returns its path.

    `keys`: metadata {key: value} in file order (types as value_type says; general.architecture
    is `arch`). `tensors`: (name, array, ggml type or None) triples: a float array written as
    f32 (ne = its shape reversed) with None, or with a ggml type its encoded bytes as uint8 rows
    (one row per ggml row)."""
    path = checked_path(path, writer)
    gguf = gguf_package()
    names = set()
    for name, _, _ in tensors:
        if len(name.encode()) >= GGML_MAX_NAME or name in names:
            raise GGMLError(f"{writer}: tensor name {name!r} is repeated or longer than {GGML_MAX_NAME - 1} bytes")
        names.add(name)
    with atomic_write(path) as tmp:
        w = gguf.GGUFWriter(tmp, arch)
        try:
            for key, value in keys.items():
                vtype, sub = value_type(key, value)
                w.add_key_value(key, list(value) if sub is not None else value, vtype, sub)
            w.add_string(ARCH + ".version", __version__)
            w.add_string(DIGEST_KEY, PLACEHOLDER)
            for name, array, raw_type in tensors:
                if raw_type is None:
                    w.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
                else:
                    w.add_tensor(name, np.ascontiguousarray(array, dtype=np.uint8), raw_dtype=gguf_type_of(raw_type))
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
        finally:
            w.close()
        seal(tmp, every_key=True)
    return path


__all__ = ["byte_vocab", "char_vocab", "value_type", "write_llm_gguf"]
