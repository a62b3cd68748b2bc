"""ggmlR tests/testthat/test-nn-functional-missing.R: functional layer constructors.
R's S3 classes (`ggml_layer`, `ggml_tensor_node`) are Python classes here (Layer, Node); R's fields
(`$node_type`, `$config$eps`) are attributes (`.node_type`, `.config["eps"]`)."""
import ggmlpy as g


def test_ggml_batch_norm_creates_ggml_layer_with_correct_type():
    l = g.ggml_batch_norm()
    assert isinstance(l, g.Layer)
    assert l.node_type == "batch_norm"


def test_ggml_batch_norm_with_custom_eps():
    l = g.ggml_batch_norm(eps=1e-3)
    assert l.config["eps"] == 1e-3


def test_ggml_embedding_creates_ggml_layer():
    l = g.ggml_embedding(vocab_size=100, dim=32)
    assert isinstance(l, g.Layer)
    assert l.node_type == "embedding"
    assert l.config["vocab_size"] == 100
    assert l.config["dim"] == 32


def test_ggml_lstm_creates_ggml_layer():
    l = g.ggml_lstm(units=32)
    assert isinstance(l, g.Layer)
    assert l.node_type == "lstm"
    assert l.config["units"] == 32
    assert l.config["return_sequences"] is False


def test_ggml_lstm_return_sequences_option():
    assert g.ggml_lstm(units=16, return_sequences=True).config["return_sequences"] is True


def test_ggml_gru_creates_ggml_layer():
    l = g.ggml_gru(units=32)
    assert isinstance(l, g.Layer)
    assert l.node_type == "gru"
    assert l.config["units"] == 32


def test_ggml_gru_return_sequences_option():
    assert g.ggml_gru(units=16, return_sequences=True).config["return_sequences"] is True


def test_nn_topo_sort_returns_correct_topological_order():
    x = g.ggml_input(shape=4)
    h = g.ggml_layer_dense(x, 8)
    out = g.ggml_layer_dense(h, 2)
    m = g.ggml_model(inputs=x, outputs=out)
    order = g.nn_topo_sort(m.outputs)
    assert isinstance(order, list)
    assert len(order) >= 3
    assert order.index(x) < order.index(h) < order.index(out)


def test_ggml_layer_conv_1d_creates_tensor_node_in_functional_api():
    x = g.ggml_input(shape=(10, 1))
    out = g.ggml_layer_conv_1d(x, filters=4, kernel_size=3)
    assert isinstance(out, g.Node)


def test_ggml_layer_conv_2d_creates_tensor_node_in_functional_api():
    x = g.ggml_input(shape=(8, 8, 1))
    out = g.ggml_layer_conv_2d(x, filters=4, kernel_size=3)
    assert isinstance(out, g.Node)
