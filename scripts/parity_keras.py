"""The `keras` parity suite: ggmlR's Keras-like model cases (tests/parity/keras.json) on ggmlpy.

Each case builds a model from its spec, installs `initial_weights`, and runs its steps
(predict, predict_classes, evaluate, fit, freeze/unfreeze), comparing every result at the
step's tolerance; accuracies, counts, classes and batch orders must match exactly.

Cases flagged `ggmlr_defect` document where ggmlR is wrong. ggmlpy does not copy those
defects: the steps a defect touches (listed in DEFECT_STEPS, with the reason) are checked
against an independent numpy reference (scripts/keras_reference.py) of the correct result,
and the other steps against ggmlR as usual.
"""
from __future__ import annotations

import math
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import keras_reference as ref  # noqa: E402

import ggmlpy.keras as K  # noqa: E402


class CaseFailure(Exception):
    pass


DEVICE = "cpu"   # parity.py --device sets it: the keras cases then compile for that device


# step index -> why ggmlpy's result differs from ggmlR's there (checked against numpy instead)
DEFECT_STEPS = {
    "keras_seq_validation_data_mixed_by_shuffle": {
        2: "validation rows stay out of training; the split counts rows, not float32 batches",
        3: "predictions of the correctly trained model", 4: "evaluation of the correctly trained model"},
    "keras_seq_sample_weight_mse": {0: "weighted mse weights the errors (ggmlR scales y)",
                                    3: "weighted mse weights the errors (ggmlR scales y)"},
    "keras_seq_conv1d_error": {0: "conv_1d works (ggmlR aborts)"},
    "keras_seq_embedding_error": {0: "Sequential embedding works (ggmlR aborts)"},
    "keras_fn_multi_output_two_heads_predict_error": {0: "every output is predicted (ggmlR fails on head1)"},
    "keras_fn_multi_output_evaluate_uses_first_output": {0: "evaluate scores the output fit trains (the last)"},
    "keras_fn_gru_return_sequences_flatten_error": {0: "return_sequences gives [N, T, units] per sample"},
}


# Cases NOT flagged by the generator where ggmlR was found wrong while porting: from the given
# step on, ggmlpy is checked against the numpy reference (batch orders still against ggmlR).
# ggmlR's batch_norm (ggml_rms_norm) trains with a wrong gradient: its first-step update of
# the layers below the norm disagrees with central finite differences, ggmlpy's agrees.
RMS_NORM_GRADIENT = "ggmlR's gradient through batch_norm (rms_norm) is wrong; ggmlpy's matches finite differences"
FOUND_DIVERGENCES = {
    "keras_seq_batch_norm_mlp": (2, RMS_NORM_GRADIENT),
    "keras_seq_batch_norm_eps_natural_init": (2, RMS_NORM_GRADIENT),
    "keras_seq_batch_norm_conv_channels": (2, RMS_NORM_GRADIENT),
    "keras_fn_batch_norm_dropout": (2, RMS_NORM_GRADIENT),
    "keras_fn_batch_norm_layer_object": (2, RMS_NORM_GRADIENT),
}


def arr(t):
    """A fixture tensor in R orientation (column-major data)."""
    d = np.array([_num(v) for v in t["data"]], dtype=np.float64)
    dim = t["dim"]
    return d.reshape(dim, order="F") if len(dim) > 1 else d


def warr(t):
    """A fixture weight (dim = ggml ne) as numpy with shape ne reversed."""
    return np.array([_num(v) for v in t["data"]], dtype=np.float32).reshape(t["dim"][::-1])


def _num(v):
    return {"Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}.get(v, v) if isinstance(v, str) else v


def close(what, got, want, tol):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise CaseFailure(f"{what}: shape {got.shape}, expected {want.shape}")
    if not np.allclose(got, want, rtol=tol["rtol"], atol=tol["atol"], equal_nan=True):
        raise CaseFailure(f"{what}: max abs error {np.nanmax(np.abs(got - want)):.3g} "
                          f"(rtol {tol['rtol']}, atol {tol['atol']})")


def same(what, got, want):
    if isinstance(want, float) and isinstance(got, float) and math.isnan(want) and math.isnan(got):
        return
    if got != want:
        raise CaseFailure(f"{what}: {got!r}, expected {want!r}")


# -- model construction ------------------------------------------------------------------------------
def build_model(case):
    spec = case["model"]
    if case["api"] == "sequential":
        m = K.ggml_model_sequential()
        if spec.get("input_shape") is not None:
            m.input_shape = tuple(spec["input_shape"])
        for layer in spec["layers"]:
            args = dict(layer["args"])
            args.setdefault("name", layer["name"])
            m = getattr(K, layer["fn"])(m, **args)
        return m
    env = {}
    for node in spec["nodes"]:
        fn = getattr(K, node["fn"])
        ins = [env[i] for i in node.get("inputs", [])]
        args = dict(node.get("args", {}))
        if node["fn"] in ("ggml_layer_add", "ggml_layer_concatenate"):
            env[node["out"]] = fn(ins, **args)
        elif node["fn"] == "ggml_apply":
            env[node["out"]] = fn(ins[0], env[node["layer"]])
        elif ins:
            env[node["out"]] = fn(ins[0], **args)
        else:
            env[node["out"]] = fn(**args)
    return K.ggml_model([env[i] for i in spec["inputs"]], [env[o] for o in spec["outputs"]])


def data_of(case, ref_name):
    if isinstance(ref_name, list):
        return [data_of(case, r) for r in ref_name]
    return arr(case["data"][ref_name])


# -- numpy reference of a whole model (inference) ------------------------------------------------------
def reference_predict(model, x, weights=None, training=False):
    """The model's outputs by keras_reference, from `weights` ({layer: {param: array}};
    default: the model's current weights)."""
    xs = x if isinstance(x, list) else [x]

    def w(l):
        return l.weights if weights is None else weights.get(l.name, {})
    if isinstance(model, K.Sequential):
        h = xs[0]
        for l in model.layers:
            h = ref.layer_forward(l.kind, l.config, w(l), [h], training)
        return [h]
    vals = {id(n): v for n, v in zip(model.inputs, xs)}
    for n in model.order:
        if n.layer is not None:
            vals[id(n)] = ref.layer_forward(n.layer.kind, n.layer.config, w(n.layer),
                                            [vals[id(p)] for p in n.parents], training)
    return [vals[id(o)] for o in model.outputs]


def reference_evaluate(model, x, y, sample_weight=None, class_weight=None):
    p = reference_predict(model, x)[-1].reshape(len(y), -1)
    w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, np.float64)
    if class_weight:
        w = w * np.array([float(class_weight.get(str(c), class_weight.get(c, 1.0))) for c in y.argmax(1)])
    if model.loss in ("mse", "mean_squared_error"):
        per = np.sum((y - p) ** 2, axis=1) / y.shape[1]
    else:
        per = -np.sum(y * np.log(np.clip(p, 1e-7, 1 - 1e-7)), axis=1)
    return {"loss": float(np.mean(per * w)),
            "accuracy": float(np.mean(p.argmax(1) == y.argmax(1))) if y.shape[1] > 1 else None,
            "n_samples": len(y)}


# -- steps ---------------------------------------------------------------------------------------------
def check_evaluate(got, want, tol):
    for k, v in want.items():
        if k in ("accuracy", "n_samples") or v is None:
            same(k, got.get(k), v)
        else:
            close(k, got[k], v, tol)


def run_step(case, model, i, step, defect):
    op = step["op"]
    tol = step.get("tolerance")
    kw = {k: (data_of(case, v) if isinstance(v, str) else v) for k, v in (step.get("kwargs") or {}).items()}
    if op in ("freeze_weights", "unfreeze_weights"):
        getattr(K, "ggml_" + op)(model, **step.get("args", {}))
        return
    x = data_of(case, step["x"])
    if step.get("expect_error") and not defect:
        try:
            run_op(case, model, op, step, x, kw)
        except Exception:  # noqa: BLE001  ggmlR raised an R error; ggmlpy must raise too (and live)
            return
        raise CaseFailure(f"step {i} ({op}) should fail like ggmlR ({step['error'][:60]}...) but did not")
    if defect:
        return check_defect_step(case, model, i, op, step, x, kw)
    got = run_op(case, model, op, step, x, kw)
    want = step["expected"]
    if op == "predict":
        if isinstance(want, list):
            for j, (g, w) in enumerate(zip(got, want)):
                close(f"predict output {j}", g, arr(w), tol)
        else:
            close("predict", got, arr(want), tol)
    elif op == "predict_classes":
        same("classes", [int(v) for v in got], [int(v) for v in want])
    elif op == "evaluate":
        check_evaluate(got, want, tol)
    elif op == "fit":
        check_fit(model, got, want, tol)


def run_op(case, model, op, step, x, kw):
    bs = step.get("batch_size", 32)
    if op == "predict":
        return K.ggml_predict(model, x, bs)
    if op == "predict_classes":
        return K.ggml_predict_classes(model, x, bs)
    if op == "evaluate":
        return K.ggml_evaluate(model, x, data_of(case, step["y"]), bs, **kw)
    if op == "fit":
        if "validation_data" in kw:
            vd = step["kwargs"]["validation_data"]
            kw["validation_data"] = (data_of(case, vd["x"]), data_of(case, vd["y"]))
        if "class_weight" in kw:
            kw["class_weight"] = {int(k): v for k, v in step["kwargs"]["class_weight"].items()}
        masks = (step.get("expected") or {}).get("dropout_masks")
        if masks:
            # ggmlR draws these masks with R's RNG; replay them instead of reproducing that RNG
            kw["dropout_masks"] = lambda name, epoch, shape: warr(masks[name][epoch - 1]).reshape(shape)
        model._record_order = True
        return model.fit(x, data_of(case, step["y"]), step["epochs"], bs, verbose=0, **kw)
    raise CaseFailure(f"unknown op {op!r}")


def _hist_vals(v):
    return [math.nan if (isinstance(a, str) and a == "NaN") else a for a in v]


def check_fit(model, h, want, tol):
    same("fit_path", h.fit_path, want["fit_path"])
    same("n_used", h.n_used, want["n_used"])
    same("n_train", h.n_train, want["n_train"])
    same("batch_order", h.batch_order, [list(o) for o in want["batch_order"]])
    hist = want["history"]
    close("train_loss", h["train_loss"], hist["train_loss"], tol)
    for k in ("train_accuracy", "val_accuracy"):
        for e, (g, w) in enumerate(zip(h[k], _hist_vals(hist[k]))):
            if w is None or g is None:
                same(f"{k}[{e}]", g, w)
            else:
                close(f"{k}[{e}]", g, w, {"rtol": 1e-12, "atol": 0})
    if any(v is not None for v in hist["val_loss"]):
        close("val_loss", h["val_loss"], hist["val_loss"], tol)
    else:
        same("val_loss", h["val_loss"], hist["val_loss"])
    weights = model.get_weights()
    for lname, params in want["weights"].items():
        for pname, t in params.items():
            close(f"weights {lname}.{pname}", weights[lname][pname].ravel(), warr(t).ravel(), tol)


# -- ggmlR defects: ggmlpy's correct result against numpy -----------------------------------------------
def check_defect_step(case, model, i, op, step, x, kw):
    tol = step.get("tolerance") or case["tolerance"]["predict"]
    if op == "predict":
        got = run_op(case, model, op, step, x, kw)
        got = got if isinstance(got, list) else [got]
        want = reference_predict(model, x)
        if len(got) != len(want):
            raise CaseFailure(f"predict gave {len(got)} outputs, expected {len(want)}")
        for j, (g, w) in enumerate(zip(got, want)):
            close(f"predict output {j} (numpy reference)", g, w, tol)
    elif op == "evaluate":
        y = data_of(case, step["y"])
        got = run_op(case, model, op, step, x, kw)
        check_evaluate(got, reference_evaluate(model, x, y, kw.get("sample_weight"), kw.get("class_weight")), tol)
    elif op == "fit":
        check_defect_fit(case, model, step, x, kw, case["tolerance"]["fit"])
    elif op == "predict_classes":
        got = run_op(case, model, op, step, x, kw)
        p = reference_predict(model, x)[0]
        same("classes (numpy reference)", [int(v) for v in got], [int(v) for v in p.reshape(len(p), -1).argmax(1) + 1])
    else:
        raise CaseFailure(f"no reference for {op}")


def check_defect_fit(case, model, step, x, kw, tol, i=None):
    """ggmlpy's fit against train_reference (finite-difference gradients, numpy optimizer)."""
    before = model.get_weights()
    trainable = [l.name for l in model._all_layers() if l.trainable and l.weights]
    y = data_of(case, step["y"])
    xs, ys = x, y
    vd = (step.get("kwargs") or {}).get("validation_data")
    if vd:
        xs = np.concatenate([x, data_of(case, vd["x"])])
        ys = np.concatenate([y, data_of(case, vd["y"])])
    h = run_op(case, model, "fit", step, x, kw)
    bs, n = step["batch_size"], len(x)
    if vd:
        n_train = (n // bs) * bs
        if h.n_train != n_train:
            raise CaseFailure(f"n_train {h.n_train}, expected {n_train} (every full batch of x trains)")
        for e, order in enumerate(h.batch_order):
            if sorted(order[:n_train]) != list(range(n_train)):
                raise CaseFailure(f"epoch {e + 1}: training batches {order[:n_train]} mix in validation rows")
    elif step.get("expected") and not case.get("ggmlr_defect"):  # the defect is elsewhere: ggmlR's batches are right
        want = step["expected"]
        same("n_train", h.n_train, want["n_train"])
        same("batch_order", h.batch_order, [list(o) for o in want["batch_order"]])
    else:
        for e, order in enumerate(h.batch_order):
            if sorted(order) != list(range(h.n_used)):
                raise CaseFailure(f"epoch {e + 1}: batch order {order} is not a permutation of the rows")
    sw = kw.get("sample_weight")
    cw = kw.get("class_weight")
    if cw:
        cls = np.argmax(ys, axis=1)
        wc = np.array([float(cw.get(str(c), cw.get(c, 1.0))) for c in cls])
        sw = wc if sw is None else np.asarray(sw) * wc
    if model.fit_loss == "cross_entropy" and sw is not None:
        ys, sw = ys * np.asarray(sw)[:, None], None   # a weighted CE is the CE of scaled labels

    def forward(W, xb):
        return reference_predict(model, xb, W, training=True)[-1].reshape(len(xb[0] if isinstance(xb, list) else xb), -1)
    loss = model.fit_loss
    if loss == "cross_entropy" and model.softmax_ce == "exact" and \
            getattr(model._output_layers()[-1], "activation", None) == "softmax":
        loss = "cross_entropy_of_probabilities"
    rows, W = ref.train_reference(forward, before, trainable, xs, ys, h.batch_order, bs, h.n_train, len(h["train_loss"]),
                                  loss, model.ggml_optimizer, sample_weight=sw)
    close("train_loss (numpy reference)", h["train_loss"], [r[0] for r in rows], tol)
    if rows[0][1] is not None:
        close("val_loss (numpy reference)", h["val_loss"], [r[1] for r in rows], tol)
    got = model.get_weights()
    for lname, params in W.items():
        for p, v in params.items():
            close(f"weights {lname}.{p} (numpy reference)", got[lname][p], v, tol)


def double_softmax_case(case) -> bool:
    """A fit of a softmax output layer with cross-entropy: ggmlR trains CE(softmax(softmax(z)))."""
    if case["compile"]["loss"] not in K.CE_LOSSES or not any(st["op"] == "fit" for st in case["program"]):
        return False
    spec = case["model"]
    if case["api"] == "sequential":
        last = spec["layers"][-1]
    else:
        last = next(n for n in spec["nodes"] if n["out"] == spec["outputs"][-1])
        if last["fn"] == "ggml_apply":   # a shared layer object: its settings are on the object's node
            last = next(n for n in spec["nodes"] if n["out"] == last["layer"])
    return last["fn"] in ("ggml_layer_dense", "ggml_dense") and last.get("args", {}).get("activation") == "softmax"


def run_keras_case(case, tol=None):
    """Run one keras case; raises CaseFailure (or any exception) on a mismatch.

    A case that trains a softmax output with cross-entropy runs twice: with
    softmax_ce="ggmlr" every step against ggmlR's recorded numbers (ggmlR's double softmax,
    reproduced on request), and with ggmlpy's default softmax_ce="exact" from its first fit
    on against the numpy reference of the true cross-entropy."""
    defects = DEFECT_STEPS.get(case["name"], {}) if case.get("ggmlr_defect") else {}
    if case.get("ggmlr_defect") and not defects:
        # a defect case not reviewed one by one: every result against the numpy reference
        defects = {i: "ggmlr_defect" for i, st in enumerate(case["program"])
                   if st["op"] not in ("freeze_weights", "unfreeze_weights")}
    if case["name"] in FOUND_DIVERGENCES:
        first = FOUND_DIVERGENCES[case["name"]][0]
        defects = {i: FOUND_DIVERGENCES[case["name"]][1] for i in range(first, len(case["program"]))}
    if double_softmax_case(case):
        _run_program(case, defects, "ggmlr")
        first_fit = min(i for i, st in enumerate(case["program"]) if st["op"] == "fit")
        exact = dict(defects)
        exact.update({i: "true cross-entropy" for i in range(first_fit, len(case["program"]))
                      if case["program"][i]["op"] not in ("freeze_weights", "unfreeze_weights")})
        _run_program(case, exact, "exact")
    else:
        _run_program(case, defects, "exact")


def _run_program(case, defects, softmax_ce):
    model = build_model(case)
    c = case["compile"]
    try:
        K.ggml_compile(model, optimizer=c["optimizer"], loss=c["loss"], metrics=c.get("metrics"), backend=DEVICE,
                       softmax_ce=softmax_ce)
    except K.GGMLError as e:
        if case.get("ggmlr_defect") and c["loss"] not in K.KNOWN_LOSSES:
            return  # ggmlR silently trains an unknown loss name as cross-entropy; ggmlpy refuses it
        raise CaseFailure(f"ggml_compile: {e}") from None
    model.set_weights({ln: {p: warr(t) for p, t in ps.items()} for ln, ps in case["initial_weights"].items()})
    for i, step in enumerate(case["program"]):
        try:
            run_step(case, model, i, step, i in defects)
        except CaseFailure as e:
            raise CaseFailure(f"[softmax_ce={softmax_ce}] step {i} ({step['op']}): {e}") from None
