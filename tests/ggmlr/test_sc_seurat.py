"""Port of ggmlR's tests/testthat/test-sc-seurat.R: the single-cell task contract on plain matrices.

Blocks that drive Seurat objects or ggml_extract/ggml_inject/RunGGML are R-only (Seurat and
SingleCellExperiment integration) and skipped. R's rnorm/rpois fixtures are numpy draws of the same
shapes (every expectation compares two computations on the same draws); R's dimnames are R-only.

Blocks of ggmlR's file not ported, and why:
- "test_ggml_extract_matrix_returns_a_dense_double_matrix_and_subsets";
  "test_ggml_extract_dgcmatrix_materialises_to_dense_only_for_the_subset": R-only: ggml_extract (Seurat/SCE
  integration).
- "test_ggml_extract_seurat_reads_the_data_layer_and_subsets_v5_layerdata";
  "test_ggml_extract_seurat_reads_a_legacy_v4_assay_getassaydata_branch";
  "test_runggml_on_a_legacy_v4_seurat_object_matches_prcomp_end_to_end";
  "test_ggml_inject_seurat_writes_a_reduction_and_provenance_metadata";
  "test_runggml_on_a_seurat_object_writes_a_reduction_end_to_end";
  "test_runggml_on_a_seurat_object_runs_on_vulkan_auto_and_agrees_with_cpu";
  "test_runggml_seurat_with_explicit_device_vulkan_runs_on_the_gpu";
  "test_vulkan_pca_on_the_sparse_seurat_data_layer_agrees_with_cpu";
  "test_runggml_seurat_on_vulkan_with_a_gene_cell_subset_is_consistent_with_cpu";
  "test_repeated_vulkan_runggml_is_deterministic_no_scheduler_aliasing";
  "test_runggml_normalize_then_scale_write_the_assay_layers_cpu": R-only: drives a Seurat object (Seurat
  integration).
- "test_runggml_default_on_a_bare_matrix_returns_a_ggml_result": R-only: RunGGML (ggml_run(ggml_task(..)) is
  its Python form, tested above).
"""
import warnings

import numpy as np
import pytest

import ggmlpy as g
from ggmlpy import singlecell

from ._backends import skip_without_vulkan



def sc_fixture(seed=11):
    return np.random.default_rng(seed).standard_normal((40, 150))


def sc_counts_fixture(seed=7):
    return np.random.default_rng(seed).poisson(4, (40, 60)).astype(np.float64)


def prcomp(x_cells_by_genes):
    """R's prcomp(center = TRUE, scale. = FALSE): sdev and scores, through the SVD."""
    xc = x_cells_by_genes - x_cells_by_genes.mean(axis=0)
    u, s, vt = np.linalg.svd(xc, full_matrices=False)
    return s / np.sqrt(xc.shape[0] - 1), xc @ vt.T


def test_ggml_ops_registry_declares_the_embed_op_with_its_required_params():
    reg = g.ggml_ops_registry()
    assert "embed" in reg
    entry = g.ggml_ops_registry("embed")
    assert entry.op == "embed"
    assert "n_components" in entry.params
    assert g.ggml_ops_registry("does_not_exist") is None


def test_ggml_task_validates_inputs_and_prints():
    X = sc_fixture()
    task = g.ggml_task("embed", X, params={"n_components": 5})
    assert isinstance(task, g.GGMLTask)
    assert task.op == "embed"
    assert "ggml_task" in repr(task)
    with pytest.raises(g.GGMLError, match="dense matrix"):
        g.ggml_task("embed", "not a matrix")
    with pytest.raises(g.GGMLError, match="single operation"):
        g.ggml_task(["a", "b"], X)


def test_ggml_run_embed_on_cpu_matches_base_prcomp():
    X = sc_fixture()
    res = g.ggml_run(g.ggml_task("embed", X, params={"n_components": 5}, device="cpu"))
    assert isinstance(res, g.GGMLResult)
    assert res.embedding.shape == (150, 5)
    assert res.metadata["backend"] == "cpu"
    sdev, scores = prcomp(X.T)
    np.testing.assert_allclose(res.metadata["stdev"], sdev[:5], rtol=1e-6)
    ours = res.embedding.copy()
    for j in range(5):                       # scores match prcomp up to per-component sign
        if np.sum(ours[:, j] * scores[:, j]) < 0:
            ours[:, j] = -ours[:, j]
    np.testing.assert_allclose(ours, scores[:, :5], rtol=1e-5, atol=1e-8)


def test_ggml_run_rejects_unknown_op_and_missing_required_params():
    X = sc_fixture()
    with pytest.raises(g.GGMLError, match="n_components"):
        g.ggml_run(g.ggml_task("embed", X))
    bad = g.ggml_task("embed", X, params={"n_components": 2})
    bad.op = "no_such_op"
    with pytest.raises(g.GGMLError, match="Unsupported op"):
        g.ggml_run(bad)
    with pytest.raises(g.GGMLError, match="ggml_task"):
        g.ggml_run("not a task")


def test_device_auto_cpu_resolution_is_sane():
    assert singlecell._resolve_backend("cpu") == "cpu"
    assert singlecell._resolve_backend("auto") in ("cpu", "vulkan")


def test_cpu_fallback_vulkan_requested_but_no_gpu_cpu_with_a_message(monkeypatch):
    monkeypatch.setattr(singlecell._VULKAN, "usable", lambda: False)
    assert singlecell._resolve_backend("auto") == "cpu"
    with pytest.warns(RuntimeWarning, match="falling back to CPU"):
        assert singlecell._resolve_backend("vulkan") == "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = g.ggml_run(g.ggml_task("embed", sc_fixture(), params={"n_components": 4}, device="vulkan"))
    assert res.metadata["backend"] == "cpu"
    assert res.embedding.shape == (150, 4)


def test_auto_resolves_to_vulkan_when_a_gpu_is_present(monkeypatch):
    monkeypatch.setattr(singlecell._VULKAN, "usable", lambda: True)
    monkeypatch.setattr(singlecell._VULKAN, "software", lambda: False)   # a real GPU, not lavapipe
    assert singlecell._resolve_backend("auto") == "vulkan"
    assert singlecell._resolve_backend("vulkan") == "vulkan"


@skip_without_vulkan
def test_ggml_run_embed_on_vulkan_agrees_with_cpu():
    X = sc_fixture()
    gpu = g.ggml_run(g.ggml_task("embed", X, params={"n_components": 5}, device="vulkan"))
    cpu = g.ggml_run(g.ggml_task("embed", X, params={"n_components": 5}, device="cpu"))
    assert gpu.metadata["backend"] == "vulkan"
    np.testing.assert_allclose(gpu.metadata["stdev"], cpu.metadata["stdev"], rtol=1e-3)


def test_registry_declares_the_normalize_and_scale_transform_ops():
    reg = list(g.ggml_ops_registry())
    assert all(op in reg for op in ("normalize", "scale"))
    assert len(g.ggml_ops_registry("normalize").params) == 0
    assert len(g.ggml_ops_registry("scale").params) == 0


def test_cpu_normalize_matches_lognormalize_and_is_tagged_as_a_transform():
    X = sc_counts_fixture()
    res = g.ggml_run(g.ggml_task("normalize", X, device="cpu"))
    assert isinstance(res, g.GGMLResult)
    assert res.metadata["kind"] == "transform"
    assert res.metadata["layer"] == "data"
    assert res.embedding.shape == X.shape
    ref = np.log1p(X / X.sum(axis=0) * 1e4)
    np.testing.assert_allclose(res.embedding, ref, rtol=1e-10)


def test_cpu_scale_matches_per_gene_z_score_with_clamp():
    X = np.log1p(sc_counts_fixture())
    res = g.ggml_run(g.ggml_task("scale", X, device="cpu"))
    assert res.metadata["layer"] == "scale.data"
    assert res.embedding.shape == X.shape
    mu = X.mean(axis=1, keepdims=True)
    sdv = X.std(axis=1, ddof=1, keepdims=True)
    sdv[sdv == 0] = 1
    ref = np.minimum((X - mu) / sdv, 10)
    np.testing.assert_allclose(res.embedding, ref, rtol=1e-10, atol=1e-12)
    assert np.all(res.embedding <= 10 + 1e-9)
    assert np.abs(res.embedding.mean(axis=1)).max() < 1e-9


@skip_without_vulkan
def test_vulkan_normalize_and_scale_agree_with_the_cpu_path():
    X = sc_counts_fixture()
    n_gpu = g.ggml_run(g.ggml_task("normalize", X, device="vulkan"))
    n_cpu = g.ggml_run(g.ggml_task("normalize", X, device="cpu"))
    assert n_gpu.metadata["backend"] == "vulkan"
    np.testing.assert_allclose(n_gpu.embedding, n_cpu.embedding, rtol=1e-3)
    D = np.log1p(X)
    s_gpu = g.ggml_run(g.ggml_task("scale", D, device="vulkan"), scale_backend="vulkan")
    s_cpu = g.ggml_run(g.ggml_task("scale", D, device="cpu"))
    assert s_gpu.metadata["backend"] == "vulkan"
    np.testing.assert_allclose(s_gpu.embedding, s_cpu.embedding, rtol=1e-3, atol=1e-5)
