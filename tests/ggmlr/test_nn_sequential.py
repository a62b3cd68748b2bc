"""ggmlR tests/testthat/test-nn-sequential.R: the Sequential API.

R's `model$layers[[i]]$config$units` is `model.layers[i - 1].config["units"]` here, and
`$output_shape` / `model$input_shape` are R-order tuples. ggmlR's `cleanup_model` (freeing
backends held by a compiled model) has nothing to free here: models hold no backend. R's
runif/rnorm data are drawn with numpy."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.errors import GGMLError


def seq(*specs, input_shape=None):
    m = g.ggml_model_sequential()
    for fn, args, kw in specs:
        m = getattr(g, "ggml_layer_" + fn)(m, *args, **kw)
    if input_shape is not None:
        m.input_shape = input_shape
    return m


def L(fn, *args, **kw):
    return (fn, args, kw)


def sum_data(n, seed=42):
    """x ~ U(0,1)^4; class 1 (column 0) when the row sums above 2."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 4))
    y = np.zeros((n, 2))
    y[np.arange(n), np.where(x.sum(1) > 2, 0, 1)] = 1
    return x, y


def small_mlp(hidden=16, **compile_kw):
    m = seq(L("dense", hidden, activation="relu"), L("dense", 2, activation="softmax"), input_shape=4)
    return g.ggml_compile(m, **({"optimizer": "adam", "loss": "categorical_crossentropy"} | compile_kw))


CNN = [L("conv_2d", 32, (3, 3), activation="relu", input_shape=(28, 28, 1)), L("max_pooling_2d", (2, 2)),
       L("flatten"), L("dense", 128, activation="relu"), L("dense", 10, activation="softmax")]


# -- model creation and layers ---------------------------------------------------------------------------
def test_ggml_model_sequential_creates_empty_model():
    model = g.ggml_model_sequential()
    assert isinstance(model, g.Sequential)
    assert len(model.layers) == 0
    assert model.input_shape is None
    assert not model.compiled


def test_ggml_layer_conv_2d_adds_layer_correctly():
    model = seq(L("conv_2d", 32, (3, 3), activation="relu", input_shape=(28, 28, 1)))
    assert len(model.layers) == 1
    assert model.layers[0].type == "conv_2d"
    assert model.layers[0].config["filters"] == 32
    assert model.layers[0].config["kernel_size"] == [3, 3]
    assert model.layers[0].config["activation"] == "relu"
    assert model.input_shape == (28, 28, 1)


def test_ggml_layer_conv_2d_handles_scalar_kernel_size():
    model = seq(L("conv_2d", 16, 5, input_shape=(28, 28, 1)))
    assert model.layers[0].config["kernel_size"] == [5, 5]


def test_ggml_layer_conv_2d_default_padding_and_strides():
    model = seq(L("conv_2d", 32, (3, 3), input_shape=(28, 28, 1)))
    assert model.layers[0].config["strides"] == [1, 1]
    assert model.layers[0].config["padding"] == "valid"
    assert model.layers[0].config["activation"] is None


def test_ggml_layer_max_pooling_2d_adds_layer_correctly():
    model = seq(L("conv_2d", 32, (3, 3), input_shape=(28, 28, 1)), L("max_pooling_2d", (2, 2)))
    assert len(model.layers) == 2
    assert model.layers[1].type == "max_pooling_2d"
    assert model.layers[1].config["pool_size"] == [2, 2]
    assert model.layers[1].config["strides"] == [2, 2]


def test_ggml_layer_flatten_adds_layer_correctly():
    model = seq(L("conv_2d", 32, (3, 3), input_shape=(28, 28, 1)), L("flatten"))
    assert len(model.layers) == 2
    assert model.layers[1].type == "flatten"


def test_ggml_layer_dense_adds_layer_correctly():
    model = seq(L("conv_2d", 32, (3, 3), input_shape=(28, 28, 1)), L("flatten"), L("dense", 128, activation="relu"))
    assert len(model.layers) == 3
    assert model.layers[2].type == "dense"
    assert model.layers[2].config["units"] == 128
    assert model.layers[2].config["activation"] == "relu"


# -- shape inference ---------------------------------------------------------------------------------------
def test_nn_infer_shapes_computes_correct_output_shapes_for_cnn():
    model = seq(*CNN)
    g.nn_infer_shapes(model)
    assert model.layers[0].output_shape == (26, 26, 32)
    assert model.layers[1].output_shape == (13, 13, 32)
    assert model.layers[2].output_shape == (5408,)
    assert model.layers[3].output_shape == (128,)
    assert model.layers[4].output_shape == (10,)


def test_nn_infer_shapes_works_with_same_padding():
    model = seq(L("conv_2d", 16, (3, 3), padding="same", input_shape=(28, 28, 1)))
    g.nn_infer_shapes(model)
    assert model.layers[0].output_shape == (28, 28, 16)


def test_nn_infer_shapes_fails_without_input_shape():
    model = seq(L("dense", 10))
    with pytest.raises(GGMLError, match="input_shape"):
        g.nn_infer_shapes(model)


# -- compile ------------------------------------------------------------------------------------------------
def test_ggml_compile_works_and_sets_compiled_flag():
    model = seq(*CNN[:3], L("dense", 10, activation="softmax"))
    model = g.ggml_compile(model, optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    assert model.compiled
    assert model.compilation["optimizer"] == "adam"
    assert model.compilation["loss"] == "categorical_crossentropy"
    assert model.compilation["metrics"] == ["accuracy"]
    assert model.compilation["backend"] is not None
    assert model.layers[0].output_shape == (26, 26, 32)


def test_ggml_compile_fails_on_empty_model():
    with pytest.raises(GGMLError, match="no layers"):
        g.ggml_compile(g.ggml_model_sequential())


def test_ggml_compile_with_sgd_optimizer():
    model = seq(L("conv_2d", 8, (3, 3), input_shape=(10, 10, 1)), L("flatten"), L("dense", 5))
    model = g.ggml_compile(model, optimizer="sgd", loss="mse")
    assert model.compiled
    assert model.compilation["optimizer"] == "sgd"
    assert model.compilation["loss"] == "mse"


# -- print / pipes ----------------------------------------------------------------------------------------
def test_print_ggml_sequential_model_works():
    output = repr(seq(*CNN))
    for word in ("Sequential Model", "conv_2d", "max_pooling_2d", "flatten", "dense", "Total parameters"):
        assert word in output


def test_print_ggml_sequential_model_works_on_empty_model():
    assert "no layers" in repr(g.ggml_model_sequential())


def test_pipe_chaining_builds_full_model():
    model = seq(L("conv_2d", 32, (3, 3), activation="relu", input_shape=(28, 28, 1)),
                L("conv_2d", 64, (3, 3), activation="relu"), L("max_pooling_2d", (2, 2)), L("flatten"),
                L("dense", 128, activation="relu"), L("dense", 10, activation="softmax"))
    assert len(model.layers) == 6
    assert [l.type for l in model.layers] == ["conv_2d", "conv_2d", "max_pooling_2d", "flatten", "dense", "dense"]


def test_ggml_set_input_and_ggml_set_output_work_on_tensors():
    ctx = g.ggml_init(1024 * 1024)
    t = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, 10)
    g.ggml_set_input(t)
    g.ggml_set_output(t)
    from ggmlpy.bindings import lib
    assert t.ptr.flags & lib.GGML_TENSOR_FLAG_INPUT and t.ptr.flags & lib.GGML_TENSOR_FLAG_OUTPUT
    g.ggml_free(ctx)


# -- training, evaluate, predict --------------------------------------------------------------------------
def test_ggml_fit_trains_a_small_dense_model():
    x, y = sum_data(128, seed=1)
    model = seq(L("dense", 8, activation="relu"), L("dense", 2, activation="softmax"), input_shape=4)
    model = g.ggml_compile(model, optimizer="adam", loss="categorical_crossentropy")
    g.ggml_fit(model, x, y, epochs=1, batch_size=32, verbose=0)


def test_ggml_evaluate_returns_accuracy_consistent_with_training():
    x, y = sum_data(256)
    model = g.ggml_fit(small_mlp(), x, y, epochs=20, batch_size=32, verbose=0)
    result = g.ggml_evaluate(model, x, y, batch_size=32)
    assert result["loss"] is not None
    assert result["accuracy"] is not None
    assert result["accuracy"] > 0.55
    assert result["loss"] < 0.69


def test_ggml_predict_returns_correct_shape_and_consistent_with_evaluate():
    x, y = sum_data(256)
    model = g.ggml_fit(small_mlp(), x, y, epochs=20, batch_size=32, verbose=0)
    preds = g.ggml_predict(model, x, batch_size=32)
    assert preds.shape[0] == 256
    assert preds.shape[1] == 2
    assert np.all(preds >= 0)
    assert np.all(preds <= 1)
    assert np.all(np.abs(preds.sum(1) - 1) < 0.01)
    predict_accuracy = np.mean(preds.argmax(1) == y.argmax(1))
    eval_result = g.ggml_evaluate(model, x, y, batch_size=32)
    assert predict_accuracy == pytest.approx(eval_result["accuracy"], rel=0.05)


# -- save / load -----------------------------------------------------------------------------------------------
def test_ggml_save_weights_and_ggml_load_weights_roundtrip(tmp_path):
    x, y = sum_data(256)
    model = g.ggml_fit(small_mlp(), x, y, epochs=20, batch_size=32, verbose=0)
    result_orig = g.ggml_evaluate(model, x, y, batch_size=32)
    tmp = tmp_path / "w.rds"
    g.ggml_save_weights(model, tmp)
    assert tmp.exists()
    model2 = g.ggml_load_weights(small_mlp(), tmp)
    result_loaded = g.ggml_evaluate(model2, x, y, batch_size=32)
    assert result_loaded["accuracy"] == pytest.approx(result_orig["accuracy"], rel=0.01)
    assert result_loaded["loss"] == pytest.approx(result_orig["loss"], rel=0.01)


def test_ggml_load_weights_rejects_mismatched_architecture(tmp_path):
    x, y = sum_data(64)
    model1 = g.ggml_fit(small_mlp(), x, y, epochs=1, batch_size=32, verbose=0)
    tmp = tmp_path / "w.rds"
    g.ggml_save_weights(model1, tmp)
    model2 = seq(L("dense", 32, activation="relu"), L("dense", 8, activation="relu"),
                 L("dense", 2, activation="softmax"), input_shape=4)
    model2 = g.ggml_compile(model2, optimizer="adam", loss="categorical_crossentropy")
    with pytest.raises(GGMLError, match="mismatch"):
        g.ggml_load_weights(model2, tmp)


# -- conv_1d, batch_norm ------------------------------------------------------------------------------------------
def test_ggml_layer_conv_1d_adds_layer_correctly():
    model = seq(L("conv_1d", 32, 3, activation="relu", input_shape=(100, 1)))
    assert len(model.layers) == 1
    assert model.layers[0].type == "conv_1d"
    assert model.layers[0].config["filters"] == 32
    assert model.layers[0].config["kernel_size"] == 3
    assert model.input_shape == (100, 1)


def test_nn_infer_shapes_works_for_conv_1d():
    model = seq(L("conv_1d", 16, 5, input_shape=(100, 1)), L("flatten"), L("dense", 10))
    g.nn_infer_shapes(model)
    assert model.layers[0].output_shape == (96, 16)
    assert model.layers[1].output_shape == (1536,)
    assert model.layers[2].output_shape == (10,)


def test_nn_infer_shapes_works_for_conv_1d_with_same_padding():
    model = seq(L("conv_1d", 16, 5, padding="same", input_shape=(100, 1)))
    g.nn_infer_shapes(model)
    assert model.layers[0].output_shape == (100, 16)


def test_ggml_layer_batch_norm_adds_layer_correctly():
    model = seq(L("dense", 64, activation="relu"), L("batch_norm"), input_shape=10)
    assert len(model.layers) == 2
    assert model.layers[1].type == "batch_norm"


def test_nn_infer_shapes_works_for_batch_norm():
    model = seq(L("dense", 64), L("batch_norm"), L("dense", 10), input_shape=10)
    g.nn_infer_shapes(model)
    assert model.layers[1].output_shape == (64,)
    assert model.layers[2].output_shape == (10,)


def test_ggml_predict_classes_returns_correct_1_based_indices():
    x, y = sum_data(128)
    model = g.ggml_fit(small_mlp(), x, y, epochs=10, batch_size=32, verbose=0)
    classes = g.ggml_predict_classes(model, x, batch_size=32)
    assert np.issubdtype(classes.dtype, np.integer)
    assert len(classes) == 128
    assert set(classes.tolist()) <= {1, 2}


def test_summary_ggml_sequential_model_works():
    model = seq(L("conv_2d", 32, (3, 3), activation="relu", input_shape=(28, 28, 1)), L("flatten"),
                L("dense", 10, activation="softmax"))
    output = g.ggml_model_summary(model, print_fn=None)
    assert "Summary" in output
    assert "Input shape" in output
    assert "Trainable" in output
    assert "memory" in output.lower()


def test_ggml_fit_returns_model_with_history():
    x, y = sum_data(128)
    model = g.ggml_fit(small_mlp(8), x, y, epochs=3, batch_size=32, verbose=0)
    assert model.history is not None
    assert isinstance(model.history, g.ggml_history)
    assert len(model.history["train_loss"]) == 3
    assert len(model.history["train_accuracy"]) == 3
    assert all(isinstance(v, float) for v in model.history["train_loss"])
    assert "Training History" in repr(model.history)


def test_ggml_fit_fails_on_uncompiled_model():
    model = seq(L("dense", 10), input_shape=5)
    with pytest.raises(GGMLError, match="compiled"):
        g.ggml_fit(model, np.zeros((32, 5)), np.zeros((32, 10)))


# -- validation, weights --------------------------------------------------------------------------------------------
def test_ggml_fit_accepts_validation_data():
    x, y = sum_data(128)
    x_val, y_val = sum_data(32, seed=2)
    model = g.ggml_fit(small_mlp(8), x, y, epochs=2, batch_size=32, validation_data=[x_val, y_val], verbose=0)
    assert len(model.history["val_loss"]) == 2
    assert len(model.history["val_accuracy"]) == 2
    assert all(v is not None for v in model.history["val_loss"])


def test_ggml_fit_validation_data_rejects_bad_input():
    model = g.ggml_compile(seq(L("dense", 2), input_shape=4), loss="categorical_crossentropy")
    x, y = sum_data(64)
    with pytest.raises(GGMLError, match="list"):
        g.ggml_fit(model, x, y, epochs=1, validation_data=x)


def test_ggml_fit_accepts_class_weight():
    x, y = sum_data(128, seed=1)
    g.ggml_fit(small_mlp(8), x, y, epochs=2, batch_size=32, class_weight={0: 1, 1: 2}, verbose=0)


def test_ggml_fit_accepts_sample_weight():
    x, y = sum_data(128, seed=1)
    sw = np.random.default_rng(1).uniform(0.5, 1.5, 128)
    g.ggml_fit(small_mlp(8), x, y, epochs=2, batch_size=32, sample_weight=sw, verbose=0)


def test_ggml_fit_rejects_class_weight_and_sample_weight_together():
    model = g.ggml_compile(seq(L("dense", 2), input_shape=4), loss="categorical_crossentropy")
    x, y = sum_data(64)
    with pytest.raises(GGMLError, match="not both"):
        g.ggml_fit(model, x, y, epochs=1, class_weight={0: 1, 1: 2}, sample_weight=np.ones(64))


def test_ggml_fit_rejects_sample_weight_with_wrong_length():
    model = g.ggml_compile(seq(L("dense", 2), input_shape=4), loss="categorical_crossentropy")
    x, y = sum_data(64)
    with pytest.raises(GGMLError, match="length"):
        g.ggml_fit(model, x, y, epochs=1, sample_weight=np.ones(10))


def test_ggml_evaluate_accepts_sample_weight():
    x, y = sum_data(128)
    model = g.ggml_fit(small_mlp(8), x, y, epochs=3, batch_size=32, verbose=0)
    sw = np.random.default_rng(3).uniform(0.5, 1.5, 128)
    result = g.ggml_evaluate(model, x, y, batch_size=32, sample_weight=sw)
    assert result["loss"] is not None
    assert result["accuracy"] is not None


def test_ggml_evaluate_accepts_class_weight():
    x, y = sum_data(128)
    model = g.ggml_fit(small_mlp(8), x, y, epochs=3, batch_size=32, verbose=0)
    result = g.ggml_evaluate(model, x, y, batch_size=32, class_weight={"0": 1, "1": 2})
    assert result["loss"] is not None


def test_ggml_evaluate_rejects_class_weight_and_sample_weight_together():
    model = g.ggml_compile(seq(L("dense", 2), input_shape=4), loss="categorical_crossentropy")
    x, y = sum_data(64)
    with pytest.raises(GGMLError, match="not both"):
        g.ggml_evaluate(model, x, y, sample_weight=np.ones(64), class_weight={0: 1, 1: 2})


# -- names, get/pop, trainable ---------------------------------------------------------------------------------------
def test_layers_get_auto_generated_names():
    model = seq(L("dense", 64, activation="relu"), L("dense", 10, activation="softmax"))
    assert model.layers[0].name == "dense_1"
    assert model.layers[1].name == "dense_2"


def test_layers_accept_custom_names():
    model = seq(L("dense", 64, activation="relu", name="hidden"), L("dense", 10, activation="softmax", name="output"))
    assert model.layers[0].name == "hidden"
    assert model.layers[1].name == "output"


def test_mixed_layer_types_get_independent_counters():
    model = seq(L("conv_2d", 32, (3, 3), input_shape=(28, 28, 1)), L("conv_2d", 64, (3, 3)), L("flatten"),
                L("dense", 128), L("dense", 10))
    assert [l.name for l in model.layers] == ["conv_2d_1", "conv_2d_2", "flatten_1", "dense_1", "dense_2"]


def test_ggml_get_layer_retrieves_by_index():
    model = seq(L("dense", 64, activation="relu"), L("dense", 10, activation="softmax"))
    layer = g.ggml_get_layer(model, index=1)
    assert layer.type == "dense"
    assert layer.config["units"] == 64
    assert g.ggml_get_layer(model, index=2).config["units"] == 10


def test_ggml_get_layer_retrieves_by_name():
    model = seq(L("dense", 64, activation="relu", name="hidden"), L("dense", 10, activation="softmax", name="output"))
    assert g.ggml_get_layer(model, name="hidden").config["units"] == 64
    assert g.ggml_get_layer(model, name="output").config["units"] == 10


def test_ggml_get_layer_retrieves_by_auto_generated_name():
    model = seq(L("dense", 64), L("dense", 10))
    assert g.ggml_get_layer(model, name="dense_2").config["units"] == 10


def test_ggml_get_layer_errors_on_out_of_range_index():
    model = seq(L("dense", 10))
    with pytest.raises(GGMLError, match="out of range"):
        g.ggml_get_layer(model, index=0)
    with pytest.raises(GGMLError, match="out of range"):
        g.ggml_get_layer(model, index=2)


def test_ggml_get_layer_errors_on_unknown_name():
    with pytest.raises(GGMLError, match="No layer"):
        g.ggml_get_layer(seq(L("dense", 10)), name="nonexistent")


def test_ggml_get_layer_errors_when_neither_index_nor_name_given():
    with pytest.raises(GGMLError, match="either index or name"):
        g.ggml_get_layer(seq(L("dense", 10)))


def test_ggml_get_layer_errors_when_both_index_and_name_given():
    with pytest.raises(GGMLError, match="not both"):
        g.ggml_get_layer(seq(L("dense", 10)), index=1, name="dense_1")


def test_ggml_pop_layer_removes_last_layer():
    model = g.ggml_pop_layer(seq(L("dense", 64, activation="relu"), L("dense", 10, activation="softmax")))
    assert len(model.layers) == 1
    assert model.layers[0].config["units"] == 64


def test_ggml_pop_layer_clears_input_shape_when_all_layers_removed():
    model = g.ggml_pop_layer(seq(L("dense", 10, input_shape=4)))
    assert len(model.layers) == 0
    assert model.input_shape is None


def test_ggml_pop_layer_errors_on_empty_model():
    with pytest.raises(GGMLError, match="no layers"):
        g.ggml_pop_layer(g.ggml_model_sequential())


def test_ggml_pop_layer_errors_on_compiled_model():
    with pytest.raises(GGMLError, match="compiled"):
        g.ggml_pop_layer(small_mlp(8))


def test_layers_default_to_trainable_true():
    model = seq(L("dense", 64), L("dense", 10))
    assert model.layers[0].trainable and model.layers[1].trainable


def test_trainable_false_can_be_set_in_constructor():
    model = seq(L("dense", 64, trainable=False), L("dense", 10))
    assert not model.layers[0].trainable
    assert model.layers[1].trainable


def test_ggml_freeze_weights_freezes_all_layers():
    model = g.ggml_freeze_weights(seq(L("dense", 64), L("dense", 32), L("dense", 10)))
    assert not any(l.trainable for l in model.layers)


def test_ggml_freeze_weights_freezes_a_range_of_layers():
    model = g.ggml_freeze_weights(seq(L("dense", 64), L("dense", 32), L("dense", 10)), **{"from": 1, "to": 2})
    assert [l.trainable for l in model.layers] == [False, False, True]


def test_ggml_unfreeze_weights_unfreezes_all_layers():
    model = g.ggml_unfreeze_weights(g.ggml_freeze_weights(seq(L("dense", 64), L("dense", 10))))
    assert all(l.trainable for l in model.layers)


def test_ggml_unfreeze_weights_unfreezes_a_range():
    model = g.ggml_freeze_weights(seq(L("dense", 64), L("dense", 32), L("dense", 10)))
    model = g.ggml_unfreeze_weights(model, **{"from": 3})
    assert [l.trainable for l in model.layers] == [False, False, True]


def test_ggml_freeze_weights_errors_on_invalid_range():
    model = seq(L("dense", 10))
    for kw in ({"from": 0}, {"to": 2}, {"from": 2, "to": 1}):
        with pytest.raises(GGMLError, match="Invalid range"):
            g.ggml_freeze_weights(model, **kw)


def test_frozen_layers_are_not_updated_during_training():
    x, y = sum_data(128)
    model = seq(L("dense", 8, activation="relu"), L("dense", 2, activation="softmax"), input_shape=4)
    model = g.ggml_freeze_weights(model, **{"from": 1, "to": 1})
    model = g.ggml_compile(model, optimizer="adam", loss="categorical_crossentropy")
    model = g.ggml_fit(model, x, y, epochs=5, batch_size=32, verbose=0)
    assert np.all(model.layers[0].weights["bias"] == 0)
    assert np.any(model.layers[1].weights["bias"] != 0)


# -- LSTM / GRU / global max pooling ---------------------------------------------------------------------------------
def _seq_data():
    n, t, c = 32, 5, 4
    vals = ((np.arange(n * t * c)) % 20 - 10) / 200.0
    x = vals.reshape((n, t, c), order="F")   # R's array(vals, dim = c(n, t, c))
    y = np.zeros((n, 2))
    y[np.arange(n), (np.arange(1, n + 1) % 2)] = 1
    return x, y


def test_ggml_layer_lstm_adds_lstm_layer_to_sequential_model():
    model = seq(L("lstm", 16, input_shape=(5, 4)), L("dense", 2, activation="softmax"))
    assert len(model.layers) == 2
    assert model.layers[0].type == "lstm"
    assert model.layers[0].config["units"] == 16


def test_ggml_layer_gru_adds_gru_layer_to_sequential_model():
    model = seq(L("gru", 16, input_shape=(5, 4)), L("dense", 2, activation="softmax"))
    assert len(model.layers) == 2
    assert model.layers[0].type == "gru"


def _recurrent_fit(kind):
    x, y = _seq_data()
    model = seq(L(kind, 8, input_shape=(5, 4)), L("dense", 2, activation="softmax"))
    model = g.ggml_compile(model, loss="categorical_crossentropy")
    model = g.ggml_fit(model, x, y, epochs=2, batch_size=16, verbose=0)
    assert np.all(np.isfinite(model.history["train_loss"]))


def test_sequential_lstm_model_fits_without_error():
    _recurrent_fit("lstm")


def test_sequential_gru_model_fits_without_error():
    _recurrent_fit("gru")


def test_ggml_layer_global_max_pooling_2d_adds_layer_to_sequential_model():
    model = seq(L("conv_2d", 8, (3, 3), activation="relu", input_shape=(8, 8, 1)), L("global_max_pooling_2d"),
                L("dense", 2, activation="softmax"))
    assert len(model.layers) == 3
    assert model.layers[1].type == "global_max_pooling_2d"


def test_sequential_globalmaxpooling2d_model_fits_without_error():
    rng = np.random.default_rng(73)
    x = rng.uniform(size=(32, 8, 8, 1))
    y = np.zeros((32, 2))
    y[np.arange(32), np.arange(1, 33) % 2] = 1
    model = seq(L("conv_2d", 4, (3, 3), activation="relu", input_shape=(8, 8, 1)), L("global_max_pooling_2d"),
                L("dense", 2, activation="softmax"))
    model = g.ggml_fit(g.ggml_compile(model, loss="categorical_crossentropy"), x, y, epochs=2, batch_size=16,
                       verbose=0)
    assert np.all(np.isfinite(model.history["train_loss"]))


def test_ggml_save_model_and_ggml_load_model_round_trip_sequential_dense_model(tmp_path):
    x, y = sum_data(64, seed=81)
    model = seq(L("dense", 8, activation="relu", input_shape=4), L("dense", 2, activation="softmax"))
    model = g.ggml_fit(g.ggml_compile(model, loss="categorical_crossentropy"), x, y, epochs=2, batch_size=32,
                       verbose=0)
    tmp = tmp_path / "m.rds"
    g.ggml_save_model(model, tmp)
    model2 = g.ggml_load_model(tmp)
    assert isinstance(model2, g.Sequential)
    assert model2.compiled
    np.testing.assert_allclose(g.ggml_predict(model, x, batch_size=32), g.ggml_predict(model2, x, batch_size=32),
                               rtol=1e-5)


def test_ggml_load_model_sequential_preserves_layer_configs(tmp_path):
    model = seq(L("dense", 16, activation="relu", input_shape=4), L("dense", 2, activation="softmax"))
    model = g.ggml_compile(model, optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).uniform(size=(32, 4))
    y = np.zeros((32, 2))
    y[:, 0] = 1
    model = g.ggml_fit(model, x, y, epochs=1, batch_size=32, verbose=0)
    g.ggml_save_model(model, tmp_path / "m.rds")
    m2 = g.ggml_load_model(tmp_path / "m.rds")
    assert m2.layers[0].config["units"] == 16
    assert m2.compilation["optimizer"] == "sgd"
    assert m2.compilation["loss"] == "mse"
