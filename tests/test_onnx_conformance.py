"""ONNX's own node test cases (onnx.backend.test.case.node) for every operator ggmlpy supports.

One test per operator runs all of its cases as onnxruntime takes them (every input fed at run
time, the default mode); a few operators also in the load-time mode (shape-giving inputs as
initializers). A case may be skipped only for a documented
ggml limitation (float64, strings, more than 4 non-unit dimensions, empty tensors...), and the
remaining known failures are listed below with their reasons: a case not listed must pass.
"""
from __future__ import annotations

import functools

import pytest

pytest.importorskip("onnx")

from ggmlpy.onnx import supported_ops  # noqa: E402
from ggmlpy.onnx.conformance import case_op, collect, run_case  # noqa: E402

# Cases of supported operators that fail, and why: Dropout in training mode draws random masks, which no
# implementation can match to the reference's draws (with ratio 0 it is the identity, and passes).
KNOWN_FAILURES = {}
for _n in ("training_dropout_default", "training_dropout_default_mask", "training_dropout", "training_dropout_mask"):
    KNOWN_FAILURES["test_" + _n] = "Dropout in training mode with a ratio above 0 (random masks)"


@functools.lru_cache(maxsize=1)
def _cases():
    return collect()


@pytest.mark.parametrize("op", [o for o in supported_ops() if ":" not in o])  # ONNX's own domain
def test_operator(op):
    cases = [c for c in _cases() if case_op(c) == op]
    if not cases:
        pytest.skip(f"ONNX ships no single-node case for {op}")
    failed = []
    for c in cases:
        r = run_case(c)
        if r.status == "fail" and c.name not in KNOWN_FAILURES:
            failed.append(f"{c.name}: {r.detail}")
        if r.status == "pass" and c.name in KNOWN_FAILURES:
            failed.append(f"{c.name} passes now: remove it from KNOWN_FAILURES")
    assert not failed, "\n".join(failed)


def test_function_expanded_cases():
    """Multi-node cases (ONNX functions expanded into supported operators) must pass too, and each
    EXPANDED_KNOWN entry must still name a failing case."""
    failed, known_failing = [], set()
    for c in _cases():
        if case_op(c) != "(multi-node)":
            continue
        r = run_case(c)
        keys = [k for k in EXPANDED_KNOWN if k in c.name]
        if r.status == "fail" and not keys:
            failed.append(f"{c.name}: {r.detail}")
        if r.status == "fail":
            known_failing.update(keys)
    failed += [f"no expanded case containing {k!r} fails now: remove it from EXPANDED_KNOWN"
               for k in EXPANDED_KNOWN if k not in known_failing]
    assert not failed, "\n".join(failed[:20])


@pytest.mark.parametrize("op", ["Reshape", "Slice", "Resize", "Pad", "Expand", "Cast", "Clip", "ConvTranspose", "GatherND",
                                "If"])
def test_operator_at_load_time(op):
    """The load-time mode (scripts/onnx_conformance.py --mode load-time) still passes."""
    failed = [f"{c.name}: {r.detail}" for c in _cases() if case_op(c) == op
              for r in [run_case(c, at_load=True)] if r.status == "fail" and c.name not in KNOWN_FAILURES]
    assert not failed, "\n".join(failed)


# Expanded cases that fail (none now; an entry is a substring of the case names).
EXPANDED_KNOWN: tuple = ()
