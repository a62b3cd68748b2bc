"""The public functions' type hints name real things, and the generated families carry theirs.

Modules use `from __future__ import annotations`, so a hint is a string that nothing evaluates at
import: a misspelt or never-imported name would go unnoticed. Here every hint of every public
function is evaluated in its module's namespace plus the imports under `if TYPE_CHECKING:`."""
import ast
import inspect
import sys
import types

import ggmlpy


def _namespace(module: types.ModuleType) -> dict:
    """The module's globals plus what its `if TYPE_CHECKING:` blocks import."""
    ns = dict(vars(module))
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            exec(compile(ast.Module(body=node.body, type_ignores=[]), module.__file__, "exec"), ns)
    return ns


def _unresolved(fn, ns: dict) -> list:
    """(hint, error) for each hint of fn that does not evaluate in ns."""
    sig = inspect.signature(fn)
    out = []
    for hint in [p.annotation for p in sig.parameters.values()] + [sig.return_annotation]:
        if isinstance(hint, str):
            try:
                eval(hint, ns)
            except Exception as e:  # noqa: BLE001  any failure is the finding
                out.append((hint, f"{type(e).__name__}: {e}"))
    return out


def test_the_check_finds_a_bad_hint():
    def f(x: "NoSuchType", y: "int | None") -> "list[int]":  # noqa: F821
        """A function with one unresolvable hint."""
    bad = _unresolved(f, {})
    assert [h for h, _ in bad] == ["NoSuchType"]


def test_public_function_hints_resolve():
    namespaces, bad = {}, []
    for name in ggmlpy.__all__:
        obj = getattr(ggmlpy, name)
        if not inspect.isfunction(obj):
            continue
        mod = obj.__module__
        if mod not in namespaces:
            namespaces[mod] = _namespace(sys.modules[mod])
        bad += [f"{name} ({mod}): {h!r}: {e}" for h, e in _unresolved(obj, namespaces[mod])]
    assert not bad, "hints that name nothing:\n" + "\n".join(bad)


def test_generated_quantizers_carry_their_template_signature():
    sig = inspect.signature(ggmlpy.quantize_q4_0)
    assert list(sig.parameters) == ["src", "n_rows", "n_per_row", "imatrix"]
    assert sig.parameters["n_rows"].annotation == "int | None" and sig.return_annotation == "np.ndarray"
    assert list(inspect.signature(ggmlpy.quantize_row_q8_0_ref).parameters) == ["src", "n_elements"]
    assert list(inspect.signature(ggmlpy.dequantize_row_q4_K).parameters) == ["raw", "n_elements"]


def test_inplace_variants_carry_their_base_signature():
    for name in ("ggml_add1", "ggml_add", "ggml_rope_multi", "ggml_soft_max_ext", "ggml_set_2d"):
        base = inspect.signature(getattr(ggmlpy, name))
        inplace = inspect.signature(getattr(ggmlpy, name + "_inplace"))
        assert "_inplace" not in inplace.parameters
        assert list(inplace.parameters) == [p for p in base.parameters if p != "_inplace"], name
        assert inplace.return_annotation == base.return_annotation == "Tensor"


def test_generated_predicates_are_typed():
    assert str(inspect.signature(ggmlpy.ggml_is_vector)) == "(t: 'Tensor') -> 'bool'"
    assert str(inspect.signature(ggmlpy.ggml_are_same_shape)) == "(a: 'Tensor', b: 'Tensor') -> 'bool'"
    assert str(inspect.signature(ggmlpy.ggml_swiglu_split)) == "(ctx: 'Context', a: 'Tensor', b: 'Tensor') -> 'Tensor'"
