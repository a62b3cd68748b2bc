"""Where the user's code is on the stack: warnings point at the user's line, not ggmlpy's."""
from __future__ import annotations

import os
import sys

_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _outside(depth: int):
    """The first frame outside the ggmlpy package, starting `depth` frames above the caller's caller,
    and how many frames up from there it is."""
    f, level = sys._getframe(depth + 1), 1
    while f is not None and f.f_code.co_filename.startswith(_PKG):
        f, level = f.f_back, level + 1
    return f, level


def user_stacklevel() -> int:
    """The `stacklevel` for a warnings.warn() made in the calling function that makes the warning
    name the first line outside ggmlpy (the user's call into the library)."""
    return _outside(1)[1]


def user_location() -> str:
    """"file:line" of the user's call into ggmlpy that led to the calling function."""
    f, _ = _outside(1)
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "<unknown>"
