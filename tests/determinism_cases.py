"""The determinism cases of tests/test_determinism.py, run in a child process:

    python determinism_cases.py OUT.npz MODE

MODE "pinned": dynamic threads off (every graph on its planned count); "forced": dynamic threads
on, with the load read as every core taken (so every graph that may compute on fewer threads
does, on one); "dynamic": dynamic threads on, as the machine's load says (the parent runs a busy
process beside). Each case's results go to OUT.npz; the fewest threads a graph was given, to
stdout ("FEWEST n of m").
"""
import sys
import threading
from pathlib import Path

import numpy as np

import ggmlpy as g
from ggmlpy.core import threads

HERE = Path(__file__).resolve().parent


def ag_fit():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(64, 256)), rng.integers(0, 10, size=256)
    g.manual_seed(5)
    model = g.ag_sequential(g.ag_linear(64, 200, "relu"), g.ag_linear(200, 300, "tanh"), g.ag_linear(300, 10))
    opt = g.optimizer_adam(model.parameters(), lr=1e-2)
    g.ag_fit(model, g.ag_softmax_cross_entropy_loss, opt, g.ag_dataloader(x, y, 64, shuffle=False), epochs=2,
             progress=False)
    return [p.numpy() for p in model.parameters()]


def compiled_step():
    g.manual_seed(6)
    net = g.ag_sequential(g.ag_linear(64, 200, "relu"), g.ag_linear(200, 300, "tanh"), g.ag_linear(300, 8))
    params = net.parameters()
    rng = np.random.default_rng(2)
    x, y = g.ag_tensor(rng.standard_normal((64, 96))), g.ag_tensor(rng.standard_normal((8, 96)))
    step = g.ag_compile(lambda xb, yb: g.ag_mse_loss(net(xb), yb), [x, y], optimizer=g.optimizer_adam(params, lr=1e-3))
    losses = [step(x, y) for _ in range(5)]
    return [np.asarray(losses, dtype=np.float64)] + [p.numpy() for p in params]


def keras_fit():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((512, 64)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 512)]
    g.manual_seed(7)
    m = g.ggml_model_sequential()
    m = g.ggml_layer_dense(m, 200, activation="relu", input_shape=64)
    m = g.ggml_layer_dense(m, 300, activation="relu")
    m = g.ggml_layer_dense(m, 10, activation="softmax")
    m = g.ggml_compile(m, optimizer="adam", loss="categorical_crossentropy")
    m = g.ggml_fit(m, x, y, epochs=2, batch_size=64, validation_split=0.25, verbose=0)
    history = [np.asarray(v, dtype=np.float64) for k, v in sorted(m.history.items()) if k.endswith(("loss", "accuracy"))]
    return [np.asarray(g.ggml_predict(m, x))] + history


def onnx_shared_by_threads():
    """tests/test_threads.py's case: four threads run one loaded model, each in its own order."""
    model = g.onnx_load(str(HERE / "onnx_fixtures" / "resnet_block.onnx"), device="cpu")
    (name, shape), = g.onnx_inputs(model).items()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(12)]
    got = [[None] * len(xs) for _ in range(4)]

    def work(i):
        for k in range(len(xs)):
            j = (k + 5 * i) % len(xs)
            got[i][j] = g.onnx_run(model, {name: xs[j]})
    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return [out[o] for res in got for out in res for o in sorted(out)]


def onnx_narrowed():
    """tests/test_onnx_narrowing.py's model: a layer norm, a feed-forward block and a residual, of
    which a Gather keeps one token (the plan computes that token's rows only)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(4)
    B, T, D = 2, 9, 16
    consts = {"g": rng.standard_normal(D), "w1": rng.standard_normal((D, 32)), "b1": rng.standard_normal(32),
              "w2": rng.standard_normal((32, D)), "b2": rng.standard_normal(D)}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in consts.items()]
    inits.append(numpy_helper.from_array(np.array(0, np.int64), "i"))
    nodes = [helper.make_node("LayerNormalization", ["x", "g"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["ob"]), helper.make_node("Add", ["x", "ob"], ["res"]),
             helper.make_node("Gather", ["res", "i"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "narrowed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, D])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = g.onnx_load(proto, device="cpu")
    return [g.onnx_run(model, {"x": rng.standard_normal((B, T, D)).astype(np.float32)})["y"] for _ in range(3)]


CASES = {f.__name__: f for f in (ag_fit, compiled_step, keras_fit, onnx_shared_by_threads, onnx_narrowed)}


def main(out: str, mode: str) -> None:
    g.set_num_threads(max(2, g.get_num_threads()))
    g.set_dynamic_threads(mode != "pinned")
    if mode == "forced":
        threads.others_runnable = threads._cores  # every core taken: a graph that may use fewer threads gets one
    fewest = [g.get_num_threads()]
    real = threads.threads_for_load

    def recorded(n):
        k = real(n)
        fewest[0] = min(fewest[0], k)
        return k
    threads.threads_for_load = recorded
    results = {}
    for name, case in CASES.items():
        for i, a in enumerate(case()):
            results[f"{name}/{i}"] = np.asarray(a)
    np.savez(out, **results)
    print(f"FEWEST {fewest[0]} of {g.get_num_threads()}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
