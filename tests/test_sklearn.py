"""scikit-learn estimators (ggmlpy.sklearn): scikit-learn's own estimator checks, its tools
(Pipeline, GridSearchCV, cross_val_score), pickling, string labels, random_state, and ggmlR's
parsnip engine functions over them."""
import pickle

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn", reason="scikit-learn is optional: pip install ggmlpy[sklearn]")

from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.model_selection import GridSearchCV, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import ggmlpy as g  # noqa: E402
from ggmlpy.sklearn import GGMLClassifier, GGMLRegressor  # noqa: E402


def _expected_failures(estimator):
    # The check compares fitting with integer weights against fitting on repeated rows at
    # rtol 1e-7: only a deterministic full-batch solver in double precision meets that
    # (scikit-learn runs it on its own MLPClassifier with solver="lbfgs" only). ggml trains in
    # float32 minibatches, where the two differ in rounding and in what each batch holds.
    # And these two compare a row's prediction alone, in another order or in a subset, at rtol
    # 1e-7: float32 products on OpenBLAS (the shared product kernel) round a column by where it
    # lies in the batch's matrix, so the same row's output moves by about 1e-7 relative.
    # An autograd module's loop ignores sample_weight altogether, as ggmlR's learners do (it warns).
    position = "float32 BLAS products: a row's prediction depends on its place in the batch by ~1e-7 (rounding)"
    weights = ("an autograd module's loop ignores sample_weight (ggmlR's learners' rule; it warns)"
               if estimator.model_fn is not None else
               "float32 minibatch training: weighting equals repeating rows only up to rounding")
    return {"check_sample_weight_equivalence_on_dense_data": weights,
            "check_methods_sample_order_invariance": position, "check_methods_subset_invariance": position}


def ag_mlp(task, n_features, n_out, params):
    """A model_fn returning an autograd module (raw outputs: logits for a classifier)."""
    return g.ag_sequential(g.ag_linear(n_features, 16, activation="relu"), g.ag_linear(16, n_out))


# ggmlR's learners with an autograd model_fn; the small module learns at ggmlR's 1e-3 too slowly for
# the checks that score the fit (check_classifiers_train asks 0.83 accuracy after one fit)
AG_CHECKED = dict(model_fn=ag_mlp, learning_rate=1e-2, epochs=40, random_state=0)


@parametrize_with_checks([GGMLClassifier(random_state=0), GGMLRegressor(random_state=0),
                          GGMLClassifier(**AG_CHECKED), GGMLRegressor(**AG_CHECKED)],
                         expected_failed_checks=_expected_failures)
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)


def _blobs(n=300, seed=0, labels=("cat", "dog", "emu")):
    x, y = make_classification(n_samples=n, n_features=8, n_informative=5, n_classes=len(labels),
                               n_clusters_per_class=1, class_sep=2.0, random_state=seed)
    return x, np.asarray(labels)[y]


def test_string_labels_classes_and_probabilities():
    x, y = _blobs()
    clf = GGMLClassifier(hidden_layers=(32,), epochs=30, random_state=1).fit(x, y)
    assert list(clf.classes_) == ["cat", "dog", "emu"]
    p = clf.predict_proba(x)
    assert p.shape == (len(x), 3)
    np.testing.assert_allclose(p.sum(axis=1), 1, rtol=1e-5)
    pred = clf.predict(x)
    assert set(pred) <= {"cat", "dog", "emu"}
    np.testing.assert_array_equal(pred, clf.classes_[p.argmax(axis=1)])
    assert clf.score(x, y) > 0.9


def test_same_random_state_same_model_and_another_differs():
    x, y = _blobs()
    a = GGMLClassifier(hidden_layers=(16,), epochs=3, random_state=7).fit(x, y).predict_proba(x)
    b = GGMLClassifier(hidden_layers=(16,), epochs=3, random_state=7).fit(x, y).predict_proba(x)
    c = GGMLClassifier(hidden_layers=(16,), epochs=3, random_state=8).fit(x, y).predict_proba(x)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_same_random_state_same_model_on_a_quiet_and_a_busy_machine(monkeypatch):
    """Dynamic threads fit on one thread while other processes hold the cores; the work is cut
    into the same pieces either way (docs/reproducibility.md): the same model, bit for bit."""
    from ggmlpy.core import threads
    x, y = _blobs()
    was = g.get_num_threads()
    monkeypatch.setattr(threads, "_cores", lambda: 2)
    monkeypatch.setattr(threads, "_dynamic", True)
    g.set_num_threads(2)
    try:
        fits = []
        for busy in (0, 2):
            monkeypatch.setattr(threads, "others_runnable", lambda: busy)
            m = GGMLClassifier(hidden_layers=(256, 128), epochs=2, batch_size=64, random_state=7).fit(x, y)
            fits.append(m.predict_proba(x))
    finally:
        g.set_num_threads(was)
    np.testing.assert_array_equal(*fits)


def test_without_random_state_ggml_set_seed_decides():
    x, y = _blobs()
    runs = []
    for _ in range(2):
        g.ggml_set_seed(3)
        runs.append(GGMLClassifier(hidden_layers=(16,), epochs=2).fit(x, y).predict_proba(x))
    np.testing.assert_array_equal(*runs)


def test_pipeline_grid_search_and_cross_validation():
    x, y = _blobs(n=240)
    pipe = make_pipeline(StandardScaler(), GGMLClassifier(hidden_layers=(16,), epochs=50, random_state=0))
    scores = cross_val_score(pipe, x, y, cv=3)
    assert scores.shape == (3,) and scores.min() > 0.8
    grid = GridSearchCV(pipe, {"ggmlclassifier__hidden_layers": [(4,), (32,)],
                               "ggmlclassifier__epochs": [1, 50]}, cv=2).fit(x, y)
    assert grid.best_params_["ggmlclassifier__epochs"] == 50
    assert grid.score(x, y) > 0.85


def test_pickled_estimators_predict_the_same():
    x, y = _blobs()
    clf = GGMLClassifier(hidden_layers=(16,), epochs=5, random_state=0).fit(x, y)
    again = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(again.predict_proba(x), clf.predict_proba(x))
    np.testing.assert_array_equal(again.predict(x), clf.predict(x))
    xr, yr = make_regression(n_samples=100, n_features=4, noise=0.1, random_state=0)
    reg = GGMLRegressor(hidden_layers=(16,), epochs=5, random_state=0).fit(xr, yr)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(reg)).predict(xr), reg.predict(xr))


def test_regressor_fits_one_and_several_targets():
    x, y = make_regression(n_samples=400, n_features=6, n_targets=2, noise=0.1, random_state=0)
    y = (y - y.mean(0)) / y.std(0)
    reg = GGMLRegressor(hidden_layers=(64,), dropout=0.0, epochs=60, random_state=0).fit(x, y)
    assert reg.predict(x).shape == (400, 2) and reg.score(x, y) > 0.9
    one = GGMLRegressor(hidden_layers=(64,), dropout=0.0, epochs=60, random_state=0).fit(x, y[:, 0])
    assert one.predict(x).shape == (400,) and one.score(x, y[:, 0]) > 0.9


def test_sample_weights_are_used():
    """A weight of zero on every sample of one class: the model learns the other two only."""
    x, y = _blobs()
    w = (y != "emu").astype(float)
    clf = GGMLClassifier(hidden_layers=(16,), epochs=20, random_state=0).fit(x, y, sample_weight=w)
    assert (clf.predict(x) == "emu").mean() < 0.05
    with pytest.raises(ValueError, match="zero"):
        GGMLClassifier().fit(x, y, sample_weight=np.zeros(len(y)))


def test_fit_records_history_and_time_and_validation_split():
    x, y = _blobs()
    clf = GGMLClassifier(hidden_layers=(8,), epochs=3, validation_split=0.25, random_state=0).fit(x, y)
    assert len(clf.history_["train_loss"]) == 3 and all(v is not None for v in clf.history_["val_loss"])
    assert clf.fit_time_ > 0 and clf.model_.compiled


@pytest.mark.parametrize("param,value", [("epochs", 0), ("epochs", 2.5), ("batch_size", 0),
                                         ("optimizer", "rmsprop"), ("learning_rate", -1.0),
                                         ("dropout", 1.0), ("hidden_layers", (0,))])
def test_bad_parameters_raise_value_errors_naming_them(param, value):
    x, y = _blobs(n=40)
    with pytest.raises(ValueError, match=param):
        GGMLClassifier(**{param: value}).fit(x, y)


def test_parsnip_engine_functions():
    x, y = _blobs()
    clf = g.ggmlr_parsnip_fit_classif(x, y, hidden_layers=[32], epochs=20, dropout=0.0, learn_rate=3e-3,
                                      backend="cpu", seed=1)
    assert isinstance(clf, GGMLClassifier) and list(clf.classes_) == ["cat", "dog", "emu"]
    assert clf.learning_rate == 3e-3 and clf.model_.compilation["lr"] == np.float32(3e-3)  # what ggml_opt reads
    assert clf.score(x, y) > 0.9
    again = g.ggmlr_parsnip_fit_classif(x, y, hidden_layers=[32], epochs=20, dropout=0.0, learn_rate=3e-3,
                                        backend="cpu", seed=1)
    np.testing.assert_array_equal(again.predict_proba(x), clf.predict_proba(x))
    xr, yr = make_regression(n_samples=200, n_features=4, noise=0.1, random_state=0)
    reg = g.ggmlr_parsnip_fit_regr(xr, yr / yr.std(), hidden_layers=64, epochs=30, dropout=0.0, seed=0)
    assert isinstance(reg, GGMLRegressor) and reg.predict(xr).shape == (200,)
    assert reg.score(xr, yr / yr.std()) > 0.8


# -- ggmlR's learner options: model_fn, training_fn, max_grad_norm ---------------------------------------
def keras_mlp(task, n_features, n_out, params):
    """A model_fn returning an uncompiled Keras-like model."""
    m = g.ggml_layer_dense(g.ggml_model_sequential(), 16, activation="relu", input_shape=n_features)
    return g.ggml_layer_dense(m, n_out, activation="softmax")


def test_model_fn_with_an_autograd_module_trains_a_classifier():
    x, y = _blobs()
    clf = GGMLClassifier(model_fn=ag_mlp, epochs=40, learning_rate=1e-2, random_state=0).fit(x, y)
    assert isinstance(clf.model_, g.ag_sequential)
    assert clf.score(x, y) > 0.9
    p = clf.predict_proba(x)
    np.testing.assert_allclose(p.sum(axis=1), 1, rtol=1e-9)
    np.testing.assert_array_equal(clf.predict(x), clf.classes_[p.argmax(axis=1)])
    loss = clf.history_["loss"]
    assert len(loss) == 40 and loss[-1] < loss[0] / 2


def test_model_fn_with_an_autograd_module_trains_a_regressor():
    x, y = make_regression(n_samples=200, n_features=5, noise=1.0, random_state=0)
    x = StandardScaler().fit_transform(x)
    reg = GGMLRegressor(model_fn=ag_mlp, epochs=60, learning_rate=1e-2, random_state=0).fit(x, y / y.std())
    assert reg.predict(x).shape == (200,)
    assert reg.score(x, y / y.std()) > 0.9


def test_model_fn_gets_the_task_the_sizes_and_the_parameters():
    seen = {}

    def build(task, n_features, n_out, params):
        seen.update(task=task, n_features=n_features, n_out=n_out, params=params)
        return keras_mlp(task, n_features, n_out, params)

    x, y = _blobs(n=60)
    clf = GGMLClassifier(model_fn=build, epochs=2, random_state=3).fit(x, y)
    assert seen["n_features"] == 8 and seen["n_out"] == 3
    assert seen["task"][0].shape == (60, 8) and list(seen["task"][1]) == list(y)
    assert seen["params"]["epochs"] == 2 and seen["params"]["model_fn"] is build
    assert clf.model_.compiled and clf.model_.compilation["loss"] == "categorical_crossentropy"


def test_training_fn_replaces_the_loop():
    calls = []

    def train(model, x, y, params):
        calls.append((x.shape, y.shape, params["epochs"]))
        return model

    x, y = _blobs(n=60)
    clf = GGMLClassifier(model_fn=ag_mlp, training_fn=train, epochs=7, random_state=0).fit(x, y)
    assert calls == [((60, 8), (60, 3), 7)]  # x [rows, features], y one-hot [rows, classes]
    assert clf.history_ is None and clf.predict_proba(x).shape == (60, 3)
    with pytest.raises(ValueError, match="training_fn must return the trained autograd module"):
        GGMLClassifier(model_fn=ag_mlp, training_fn=lambda m, x, y, p: None).fit(x, y)


def test_max_grad_norm_clips_every_step():
    """SGD steps of lr * clipped gradient: the weights move at most steps * lr * max_grad_norm."""
    built = []

    def build(task, n_features, n_out, params):
        built.append(ag_mlp(task, n_features, n_out, params))
        built.append({k: v.copy() for k, v in built[0].state_dict().items()})
        return built[0]

    x, y = _blobs(n=64)
    lr, norm, epochs, batch = 0.5, 1e-3, 2, 16
    GGMLClassifier(model_fn=build, optimizer="sgd", learning_rate=lr, max_grad_norm=norm, epochs=epochs,
                   batch_size=batch, random_state=0).fit(x, y)
    model, before = built
    moved = np.sqrt(sum(np.sum((model.state_dict()[k] - v) ** 2) for k, v in before.items()))
    steps = epochs * 64 // batch
    assert 0 < moved <= steps * lr * norm * (1 + 1e-4)
    built.clear()
    GGMLClassifier(model_fn=build, optimizer="sgd", learning_rate=lr, epochs=epochs, batch_size=batch,
                   random_state=0).fit(x, y)
    model, before = built
    assert np.sqrt(sum(np.sum((model.state_dict()[k] - v) ** 2) for k, v in before.items())) > 100 * steps * lr * norm


def test_max_grad_norm_is_a_tunable_hyper_parameter():
    x, y = _blobs(n=90)
    search = GridSearchCV(GGMLClassifier(model_fn=ag_mlp, epochs=5, random_state=0),
                          {"max_grad_norm": [0.5, np.inf], "learning_rate": [1e-3, 1e-2]}, cv=3).fit(x, y)
    assert search.best_params_["max_grad_norm"] in (0.5, np.inf)
    assert len(search.cv_results_["params"]) == 4


def test_autograd_fits_repeat_with_random_state_and_leave_the_generator_alone():
    x, y = _blobs(n=80)
    state = g.get_rng_state()
    a = GGMLClassifier(model_fn=ag_mlp, epochs=3, random_state=5).fit(x, y).predict_proba(x)
    assert g.get_rng_state() == state
    b = GGMLClassifier(model_fn=ag_mlp, epochs=3, random_state=5).fit(x, y).predict_proba(x)
    c = GGMLClassifier(model_fn=ag_mlp, epochs=3, random_state=6).fit(x, y).predict_proba(x)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_autograd_validation_split():
    x, y = _blobs(n=80)
    clf = GGMLClassifier(model_fn=ag_mlp, epochs=3, validation_split=0.25, random_state=0).fit(x, y)
    assert len(clf.history_["val_loss"]) == 3 and all(np.isfinite(clf.history_["val_loss"]))


def test_learner_options_refused_where_they_would_do_nothing():
    x, y = _blobs(n=40)
    with pytest.raises(ValueError, match="training_fn applies to an autograd module"):
        GGMLClassifier(training_fn=lambda m, x, y, p: m).fit(x, y)
    with pytest.raises(ValueError, match="max_grad_norm applies to an autograd module"):
        GGMLClassifier(max_grad_norm=1.0).fit(x, y)
    with pytest.raises(ValueError, match="device chooses ggml_fit's backend"):
        GGMLClassifier(model_fn=ag_mlp, device="vulkan").fit(x, y)
    with pytest.raises(ValueError, match="callbacks are ggml_fit's"):
        GGMLClassifier(model_fn=ag_mlp, callbacks=[g.ggml_callback_early_stopping()]).fit(x, y)
    with pytest.warns(UserWarning, match="sample_weight is ignored"):
        GGMLClassifier(model_fn=ag_mlp, epochs=1).fit(x, y, sample_weight=np.ones(40))


@pytest.mark.parametrize("param,value,message", [
    ("max_grad_norm", -1.0, "max_grad_norm must be a number >= 0"),
    ("max_grad_norm", float("nan"), "max_grad_norm must be a number >= 0"),
    ("max_grad_norm", "1", "max_grad_norm must be a number >= 0"),
    ("model_fn", 3, "model_fn must be a function"),
    ("training_fn", "loop", "training_fn must be a function"),
    ("model_fn", lambda *a: [1, 2], "model_fn must return an uncompiled Keras-like model"),
    ("model_fn", lambda t, f, o, p: keras_mlp(t, f, o, p).compile(loss="mse"), "must return an uncompiled model"),
])
def test_bad_learner_options_raise_value_errors(param, value, message):
    x, y = _blobs(n=40)
    with pytest.raises(ValueError, match=message):
        GGMLClassifier(**{param: value}).fit(x, y)


def test_pickled_autograd_estimators_predict_the_same():
    x, y = _blobs(n=80)
    clf = GGMLClassifier(model_fn=ag_mlp, epochs=3, random_state=0).fit(x, y)
    state = g.get_rng_state()
    twin = pickle.loads(pickle.dumps(clf))
    assert g.get_rng_state() == state
    assert isinstance(twin.model_, g.ag_sequential) and twin.model_ is not clf.model_
    np.testing.assert_array_equal(twin.predict_proba(x), clf.predict_proba(x))

    def reads_the_task(task, n_features, n_out, params):
        return ag_mlp(task, task[0].shape[1], n_out, params)

    clf = GGMLClassifier(model_fn=reads_the_task, epochs=1).fit(x, y)
    clf.model_fn = clf._rebuild_[2]["model_fn"] = (lambda task, f, o, p: None)
    with pytest.raises(ValueError, match=r"rebuilds the autograd module with model_fn\(None, 8, 3, params\)"):
        clf.__setstate__(clf.__getstate__())
