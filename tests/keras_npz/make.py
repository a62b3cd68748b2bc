"""The .npz model files of tests/keras_npz, as ggmlpy wrote them before its model file became GGUF
(keras/io.py's "ggmlpy-keras-1" format). Kept to show how they were made; run it with a ggmlpy
that still writes .npz (0.1.0 up to the commit that moved ggml_save_model to GGUF):

    python tests/keras_npz/make.py tests/keras_npz
"""
import sys
import numpy as np
import ggmlpy as g
out = sys.argv[1]
rng = np.random.default_rng(3)
m = g.ggml_model_sequential()
m = g.ggml_layer_conv_2d(m, 3, 3, activation="relu", padding="same", input_shape=(6, 5, 2))
m = g.ggml_layer_batch_norm(m, mode="batch")
m = g.ggml_layer_max_pooling_2d(m, 2)
m = g.ggml_layer_flatten(m)
m = g.ggml_layer_dense(m, 4, activation="tanh", name="a_rather_long_layer_name_that_no_gguf_tensor_name_could_hold_whole")
m = g.ggml_layer_dense(m, 2, activation="softmax")
m._rng = np.random.default_rng(0)
m = g.ggml_compile(m, optimizer="sgd", lr=0.05)
x = rng.uniform(0, 1, (8, 6, 5, 2))
y = np.eye(2)[rng.integers(0, 2, 8)]
m.fit(x, y, epochs=2, batch_size=4)
g.ggml_save_model(m, f"{out}/sequential.npz")
g.ggml_save_weights(m, f"{out}/sequential_weights.npz")
a = g.ggml_input(shape=3, name="a")
b = g.ggml_input(shape=2, name="b")
shared = g.ggml_dense(3, activation="tanh", name="shared")
ha = g.ggml_apply(g.ggml_layer_dense(a, 2, name="pa"), shared)
hb = g.ggml_apply(g.ggml_layer_dense(b, 2, name="pb"), shared)
s = g.ggml_layer_add([ha, hb], name="sum")
c = g.ggml_layer_concatenate([s, ha], axis=0, name="cat")
f = g.ggml_model([a, b], g.ggml_layer_dense(c, 2, activation="softmax", name="out"))
f._rng = np.random.default_rng(1)
f = g.ggml_compile(f, loss="mse", lr=0.01)
xa, xb = rng.uniform(-1, 1, (8, 3)), rng.uniform(-1, 1, (8, 2))
f.fit([xa, xb], y, epochs=2, batch_size=4)
g.ggml_save_model(f, f"{out}/functional.npz")
np.savez(f"{out}/expected.npz", x=x, xa=xa, xb=xb, sequential=g.ggml_predict(m, x, 4), functional=g.ggml_predict(f, [xa, xb], 4))
