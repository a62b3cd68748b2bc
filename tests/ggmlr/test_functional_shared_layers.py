"""ggmlR tests/testthat/test-functional-shared-layers.R: ggml_dense() + ggml_apply() sharing.
R's fields are attributes: `$node_type`, `$config$units`, `$layer_id` (the sharing key, which a
node shows as its layer's), `$id`; `node.layer is layer` holds too."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.errors import GGMLError

RNG = np.random.default_rng(7)


def test_ggml_dense_builds_a_reusable_ggml_layer_object():
    enc = g.ggml_dense(8, activation="relu", name="enc")
    assert isinstance(enc, g.Layer)
    assert enc.node_type == "dense"
    assert enc.config["units"] == 8
    assert enc.name == "enc"
    assert enc.trainable


def test_ggml_apply_requires_a_tensor_node_and_a_layer_object():
    enc = g.ggml_dense(4)
    with pytest.raises(GGMLError, match="node"):
        g.ggml_apply(42, enc)
    x = g.ggml_input(shape=4)
    with pytest.raises(GGMLError, match="layer"):
        g.ggml_apply(x, [])


def test_ggml_apply_returns_a_tensor_node_carrying_the_layer_sharing_key():
    x = g.ggml_input(shape=4)
    enc = g.ggml_dense(3, activation="relu")
    out = g.ggml_apply(x, enc)
    assert isinstance(out, g.Node)
    assert out.layer_id == enc.layer_id  # sharing key == layer identity
    assert out.node_type == "dense"
    assert out.parents[0] is x
    assert out.layer is enc


def test_a_shared_ggml_dense_layer_applied_to_two_inputs_reuses_one_layer_id():
    shared = g.ggml_dense(5, activation="relu")
    x1, x2 = g.ggml_input(shape=4), g.ggml_input(shape=4)
    o1, o2 = g.ggml_apply(x1, shared), g.ggml_apply(x2, shared)
    # both applications reference the same layer object (weight sharing)
    assert o1.layer_id == o2.layer_id
    assert o1.layer_id == shared.layer_id
    # but they are distinct graph nodes
    assert o1.id != o2.id
    assert o1.layer is o2.layer is shared


def test_shared_single_input_functional_model_with_ggml_apply_predicts():
    shared = g.ggml_dense(2, activation="softmax")
    x = g.ggml_input(shape=4)
    m = g.ggml_model(inputs=x, outputs=g.ggml_apply(x, shared))
    m = m.compile(optimizer="adam", loss="categorical_crossentropy")
    p = m.predict(RNG.normal(size=(32, 4)), batch_size=32)
    assert isinstance(p, np.ndarray) and p.shape == (32, 2)


def test_multi_input_shared_layer_model_builds_and_predicts():
    """ggmlR skips the predict (its backend aborts: 'tensor buffer not set'); ggmlpy predicts
    both outputs, and the shared layer gives the same function on both inputs."""
    shared = g.ggml_dense(2, activation="softmax")
    x1, x2 = g.ggml_input(shape=4), g.ggml_input(shape=4)
    o1, o2 = g.ggml_apply(x1, shared), g.ggml_apply(x2, shared)
    m = g.ggml_model(inputs=[x1, x2], outputs=[o1, o2])
    assert isinstance(m, g.Functional)
    assert o1.layer_id == o2.layer_id
    m.compile(optimizer="adam", loss="categorical_crossentropy")
    xa = RNG.normal(size=(32, 4))
    p1, p2 = m.predict([xa, xa], batch_size=32)
    np.testing.assert_array_equal(p1, p2)
