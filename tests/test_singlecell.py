"""ggmlpy.singlecell beyond ggmlR's own tests: argument checks, overrides, edge cases."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.errors import GGMLError


def test_result_constructor_and_item_access():
    r = g.ggml_result(np.zeros((3, 2)), {"backend": "cpu"}, {"total": 0.5})
    assert r["embedding"].shape == (3, 2) and r.metadata["backend"] == "cpu" and r.timings == {"total": 0.5}
    assert repr(r) == "<ggml_result> embedding=3 x 2  backend=cpu"


def test_registry_is_sorted_and_entries_are_complete():
    reg = g.ggml_ops_registry()
    assert list(reg) == sorted(reg) == ["embed", "largest_gene", "normalize", "scale"]
    assert all(callable(e.engine) and e.desc for e in reg.values())


def test_run_keywords_override_task_params_and_backend_overrides_device():
    X = np.random.default_rng(0).standard_normal((6, 30))
    task = g.ggml_task("embed", X, params={"n_components": 2}, device="vulkan")
    res = g.ggml_run(task, backend="cpu", n_components=3)
    assert res.embedding.shape == (30, 3) and res.metadata["backend"] == "cpu"
    assert set(res.timings) == {"total", "centre", "matmul_cov", "eigen", "matmul_proj"}


def test_n_components_is_capped_by_the_matrix():
    res = g.ggml_run(g.ggml_task("embed", np.eye(4)[:, :3], {"n_components": 50}, "cpu"))
    assert res.embedding.shape == (3, 3)


def test_bad_arguments():
    X = np.ones((4, 5))
    with pytest.raises(ValueError, match="device"):
        g.ggml_task("embed", X, device="gpu")
    with pytest.raises(GGMLError, match="dense matrix"):
        g.ggml_task("embed", np.ones((2, 2, 2)))
    with pytest.raises(GGMLError, match="n_components"):
        g.ggml_run(g.ggml_task("embed", X, {"n_components": 0}, "cpu"))
    with pytest.raises(GGMLError, match="at least one"):
        g.ggml_run(g.ggml_task("embed", np.ones((4, 0)), {"n_components": 1}, "cpu"))
    with pytest.raises(GGMLError, match="genes"):
        g.ggml_run(g.ggml_task("largest_gene", X, device="cpu"), genes=["a"])
    with pytest.raises(ValueError, match="scale_backend"):
        g.ggml_run(g.ggml_task("scale", X, device="cpu"), scale_backend="gpu")
    with pytest.raises(ValueError, match="backend"):
        g.ggml_run(g.ggml_task("scale", X), backend="cuda")


def test_largest_gene_without_names_gives_0_based_indices():
    m = np.array([[0.0, 1, 5], [0, 3, 5]])
    res = g.ggml_run(g.ggml_task("largest_gene", m, device="cpu")).embedding
    assert res["largest_gene"] == [None, 1, 0]
    np.testing.assert_allclose(res["percent.Largest.Gene"], [0, 75, 50])


def test_scale_clamps_only_above_and_keeps_constant_genes_at_zero():
    X = np.vstack([np.full(5, 3.0), [0, 0, 0, 0, 100.0]])
    out = g.ggml_run(g.ggml_task("scale", X, device="cpu"), max_value=1.0).embedding
    assert np.all(out[0] == 0)
    assert out[1].max() == 1.0 and out[1].min() == pytest.approx(-0.4472135955)
