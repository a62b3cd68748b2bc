"""ggmlR's single-cell entry points on AnnData (RunGGML, ggml_extract, ggml_inject): results where
scanpy keeps its own, and the same numbers as scanpy's sc.pp.normalize_total + log1p, sc.pp.pca,
sc.pp.neighbors and sc.tl.umap on generated counts (explained variances within 1e-4 relative,
the leading principal subspace within 1e-3, kNN recall against exact neighbours, UMAP's
trustworthiness within 0.02 of scanpy's)."""
import warnings

import numpy as np
import pytest

anndata = pytest.importorskip("anndata", reason="AnnData is optional: pip install ggmlpy[anndata]")
sp = pytest.importorskip("scipy.sparse")

import ggmlpy as g  # noqa: E402


def _counts(n_cells=800, n_genes=300, n_types=4, seed=0):
    """Poisson counts of a few cell types, each with its own sparse expression profile."""
    rng = np.random.default_rng(seed)
    means = rng.gamma(0.6, 2.0, size=(n_types, n_genes)) * (rng.random((n_types, n_genes)) < 0.3) + 0.05
    kind = rng.integers(0, n_types, n_cells)
    depth = rng.uniform(0.5, 1.5, (n_cells, 1))
    return rng.poisson(means[kind] * depth).astype(np.float32), kind


def _adata(**kw):
    counts, kind = _counts(**kw)
    a = anndata.AnnData(sp.csr_matrix(counts))
    a.obs_names = [f"cell{i}" for i in range(a.n_obs)]
    a.var_names = [f"gene{j}" for j in range(a.n_vars)]
    a.layers["counts"] = a.X.copy()
    a.obs["kind"] = kind.astype(str)
    return a


@pytest.fixture(scope="module")
def pair():
    """(ours, scanpy's): the same counts, normalised and reduced to 20 principal components."""
    sc = pytest.importorskip("scanpy", reason="the comparisons run scanpy: pip install scanpy")
    ours, theirs = _adata(), _adata()
    g.RunGGML(ours, "normalize", device="cpu")
    g.RunGGML(ours, "embed", n_components=20, device="cpu")
    sc.pp.normalize_total(theirs, target_sum=1e4)
    sc.pp.log1p(theirs)
    sc.pp.pca(theirs, n_comps=20, svd_solver="covariance_eigh")
    return ours, theirs, sc


def test_normalize_matches_normalize_total_and_log1p(pair):
    ours, theirs, _ = pair
    diff = abs(ours.X - theirs.X).max()
    assert diff < 1e-5 * max(1.0, abs(theirs.X).max())
    assert sp.issparse(ours.X)   # LogNormalize keeps the counts' sparsity


def test_normalize_of_x_is_in_place_as_scanpys():
    counts, _ = _counts(n_cells=200, n_genes=50)
    ref = np.log1p(counts.astype(np.float64) / np.maximum(counts.sum(1, keepdims=True), 1) * 1e4)
    a = anndata.AnnData(sp.csr_matrix(counts))
    held = a.X
    g.RunGGML(a, "normalize", device="cpu")
    assert a.uns["normalize_ggml"]["inplace"] and np.shares_memory(a.X.data, held.data)
    np.testing.assert_allclose(held.toarray(), ref, rtol=3e-7)      # X's own values, as normalize_total's
    b = anndata.AnnData(sp.csr_matrix(counts))
    held = b.X
    g.RunGGML(b, "normalize", device="cpu", inplace=False)           # a new matrix when asked
    assert not b.uns["normalize_ggml"]["inplace"] and not np.shares_memory(b.X.data, held.data)
    np.testing.assert_array_equal(held.toarray(), counts)
    np.testing.assert_allclose(b.X.toarray(), ref, rtol=3e-7)
    c = _adata(n_cells=200, n_genes=50)                               # counts in their layer: read, never written
    g.RunGGML(c, "normalize", device="cpu")
    assert not np.shares_memory(c.X.data, c.layers["counts"].data)
    np.testing.assert_array_equal(c.layers["counts"].toarray(), _counts(n_cells=200, n_genes=50)[0])
    d = anndata.AnnData(sp.csr_matrix(counts))
    view = d[:100]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                               # anndata: the view becomes its own AnnData
        g.RunGGML(view, "normalize", device="cpu")
    np.testing.assert_array_equal(d.X.toarray(), counts)             # a view's parent is left alone
    np.testing.assert_allclose(view.X.toarray(), ref[:100], rtol=3e-7)


def test_pca_matches_scanpy(pair):
    from scipy.linalg import subspace_angles
    ours, theirs, _ = pair
    assert ours.obsm["X_pca"].shape == (ours.n_obs, 20) and ours.varm["PCs"].shape == (ours.n_vars, 20)
    var, ref = ours.uns["pca"]["variance"], theirs.uns["pca"]["variance"]
    np.testing.assert_allclose(var, ref, rtol=1e-4)
    np.testing.assert_allclose(ours.uns["pca"]["variance_ratio"], theirs.uns["pca"]["variance_ratio"], rtol=1e-4)
    # the components the spectrum separates: up to the last gap of at least 1% before component 20
    gaps = (ref[:-1] - ref[1:]) / ref[:-1]
    m = int(np.flatnonzero(gaps > 1e-2)[-1]) + 1
    assert m >= 3
    assert subspace_angles(ours.varm["PCs"][:, :m], theirs.varm["PCs"][:, :m]).max() < 1e-3
    assert ours.uns["pca_ggml"]["backend"] == "cpu"


def test_neighbors_are_exact_and_where_scanpy_reads_them(pair):
    from sklearn.neighbors import NearestNeighbors
    ours, _, _ = pair
    g.RunGGML(ours, "neighbors", reduction="pca", n_neighbors=15, device="cpu")
    uns = ours.uns["neighbors"]
    assert uns["connectivities_key"] == "connectivities" and uns["distances_key"] == "distances"
    assert uns["params"]["n_neighbors"] == 15
    dist = ours.obsp["distances"].tocsr()
    exact = NearestNeighbors(n_neighbors=16, algorithm="brute").fit(ours.obsm["X_pca"])
    want = exact.kneighbors(ours.obsm["X_pca"], return_distance=False)[:, 1:]
    got = [set(dist.indices[dist.indptr[i]:dist.indptr[i + 1]]) for i in range(ours.n_obs)]
    recall = np.mean([len(got[i] & set(want[i])) / 15 for i in range(ours.n_obs)])
    assert recall >= 0.99
    conn = ours.obsp["connectivities"]
    assert conn.shape == (ours.n_obs, ours.n_obs) and abs(conn - conn.T).max() < 1e-12   # SNN is symmetric
    assert ours.obsp["neighbors_nn"].sum() == ours.n_obs * 16   # each cell and its 15 neighbours


def test_umap_is_as_trustworthy_as_scanpys(pair):
    from sklearn.manifold import trustworthiness
    ours, theirs, sc = pair
    g.RunGGML(ours, "umap", reduction="pca", device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sc.pp.neighbors(theirs, n_neighbors=15)
        sc.tl.umap(theirs, random_state=0)
    assert ours.obsm["X_umap"].shape == (ours.n_obs, 2)
    assert set(ours.uns["umap"]["params"]) == {"a", "b"}
    t_ours = trustworthiness(ours.obsm["X_pca"], ours.obsm["X_umap"], n_neighbors=15)
    t_theirs = trustworthiness(theirs.obsm["X_pca"], theirs.obsm["X_umap"], n_neighbors=15)
    assert t_ours >= t_theirs - 0.02, (t_ours, t_theirs)


def test_extract_reads_x_layers_raw_and_selections():
    a = _adata(n_cells=30, n_genes=12)
    a.raw = a.copy()
    full = g.ggml_extract(a)
    assert isinstance(full, np.ndarray) and full.shape == (12, 30)    # features x cells
    np.testing.assert_array_equal(full, a.X.toarray().T)
    part = g.ggml_extract(a, layer="counts", genes=["gene3", "gene1"], cells=[0, -1], keep_sparse=True)
    assert sp.issparse(part) and part.shape == (2, 2)
    np.testing.assert_array_equal(part.toarray(), a.layers["counts"][[0, 29]][:, [3, 1]].toarray().T)
    mask = np.zeros(30, bool)
    mask[5:8] = True
    assert g.ggml_extract(a, cells=mask, use_raw=True).shape == (12, 3)
    m = np.arange(12.0).reshape(3, 4)   # a plain features x cells matrix, as ggmlR's matrix method
    np.testing.assert_array_equal(g.ggml_extract(m, genes=[2], cells=[1, 3]), [[9.0, 11.0]])
    with pytest.raises(g.GGMLError, match="not in the data, e.g. \\['nope'\\]"):
        g.ggml_extract(a, genes=["gene1", "nope"])
    with pytest.raises(g.GGMLError, match="no layer 'spliced'"):
        g.ggml_extract(a, layer="spliced")
    with pytest.raises(g.GGMLError, match="out of range"):
        g.ggml_extract(a, cells=[30])
    with pytest.raises(g.GGMLError, match="expected an AnnData"):
        g.ggml_extract([[1, 2]])


def test_selected_cells_and_genes_land_in_their_rows():
    a = _adata(n_cells=60, n_genes=40)
    genes = [f"gene{j}" for j in range(0, 40, 2)]
    g.RunGGML(a, "embed", n_components=5, genes=genes, cells=list(range(50)), device="cpu", reduction_name="sub")
    emb = a.obsm["X_sub"]
    assert emb.shape == (60, 5) and np.isnan(emb[50:]).all() and np.isfinite(emb[:50]).all()
    pcs = a.varm["sub_PCs"]
    assert np.all(pcs[1::2] == 0) and np.any(pcs[0::2] != 0)   # unused genes: zeros, as scanpy's mask_var
    with pytest.raises(g.GGMLError, match="subset the AnnData first"):
        g.RunGGML(a, "normalize", genes=genes, device="cpu")


def test_largest_gene_writes_obs_columns():
    a = _adata(n_cells=40, n_genes=25)
    g.RunGGML(a, "largest_gene", device="cpu")
    counts = a.layers["counts"].toarray()
    np.testing.assert_array_equal(a.obs["largest_gene"], [f"gene{j}" for j in counts.argmax(axis=1)])
    np.testing.assert_allclose(a.obs["percent.Largest.Gene"], counts.max(1) / counts.sum(1) * 100)


def test_a_matrix_gives_the_result_as_ggmlr_does():
    counts, _ = _counts(n_cells=50, n_genes=20)
    res = g.RunGGML(counts.T.astype(np.float64), "embed", n_components=3, device="cpu")
    assert isinstance(res, g.GGMLResult) and res.embedding.shape == (50, 3)


def test_the_vulkan_device_gives_the_cpus_pca():
    if not g.ggml_vulkan_available():
        pytest.skip("no Vulkan device")
    a, b = _adata(n_cells=300, n_genes=64), _adata(n_cells=300, n_genes=64)
    for x, device in ((a, "cpu"), (b, "vulkan")):
        g.RunGGML(x, "normalize", device=device)
        g.RunGGML(x, "embed", n_components=5, device=device)
    assert b.uns["pca_ggml"]["backend"] == "vulkan"
    np.testing.assert_allclose(b.uns["pca"]["variance"], a.uns["pca"]["variance"], rtol=5e-3)
