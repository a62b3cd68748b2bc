"""What every front end takes as an array of numbers (ag_tensor, onnx_run, the Keras-like models'
x and y): numpy's conversions, minus the silent ones. numpy turns None into NaN in an object
array, drops the imaginary part of a complex number with a warning, parses strings, and raises
its own ValueError for a ragged list; each is a GGMLError naming the argument here."""
from __future__ import annotations

import numpy as np

from .errors import GGMLError


def numeric_array(data, what: str) -> np.ndarray:
    """`data` as a numpy array of booleans, integers or floats (ml_dtypes' bfloat16 and float8 as
    float32); objects pass when every element is a number (a pandas column of them)."""
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError) as e:  # a ragged list, or something numpy cannot hold
        raise GGMLError(f"{what}: not a rectangular array of numbers ({e})") from None
    kind = arr.dtype.kind
    if kind in "biuf":
        return arr
    if kind == "c":
        raise GGMLError(f"{what}: complex values are not supported (the imaginary part would be dropped)")
    if kind == "O":  # numpy would parse strings and turn None into NaN: numbers only
        for v in arr.flat:
            if v is None:
                raise GGMLError(f"{what}: holds None; give missing values as NaN")
            if isinstance(v, (complex, np.complexfloating)):
                raise GGMLError(f"{what}: complex values are not supported (the imaginary part would be dropped)")
            if not isinstance(v, (int, float, np.integer, np.floating, np.bool_)):
                raise GGMLError(f"{what}: expected numbers, got an object of type {type(v).__name__}")
        return arr.astype(np.float64)
    if kind == "V":  # ml_dtypes (bfloat16, float8): numbers numpy knows by a custom type
        try:
            return arr.astype(np.float32)
        except (TypeError, ValueError):
            pass
    raise GGMLError(f"{what}: expected numbers (a numeric array), got dtype {arr.dtype}")
