"""ONNX LSTM, GRU and RNN, unrolled over the (static) sequence into the model's one ggml graph.

The input projection of every step is one product (X @ W^T for the whole sequence); each
step adds H_{t-1} @ R^T and applies ONNX's gate equations (gate order i, o, f, c; default
activations Sigmoid, Tanh, Tanh; optional peepholes). Directions: forward, reverse,
bidirectional. On ggml's CPU backend with ggmlpy's kernels an LSTM direction's steps are one
node (kernels/rnn.c) instead of about sixteen ggml nodes a step.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .graph import Val
from .layout import cont, permute, reshape
from .op_table import cval, op
from .onnx_lib import onnx_lib


def _s(v):
    return v.decode() if isinstance(v, bytes) else v


@op("LSTM", const_inputs=(1, 2, 3, 4, 7))
def _lstm(b, node, ins, at):
    ins = list(ins) + [None] * (8 - len(ins))
    X, W, R, B, seq_lens, h0, c0, P = ins[:8]
    batch_first = int(at.get("layout", 0)) == 1
    if batch_first:  # (N, T, in) and (N, dirs, H): to ONNX's default layout, and back at the end
        X = Val((X.shape[1], X.shape[0], X.shape[2]), X.dtype, t=permute(b, b.tensor(X), (1, 0, 2)))
        h0 = None if h0 is None else Val((h0.shape[1], h0.shape[0], h0.shape[2]), h0.dtype,
                                         t=permute(b, b.tensor(h0), (1, 0, 2)))
        c0 = None if c0 is None else Val((c0.shape[1], c0.shape[0], c0.shape[2]), c0.dtype,
                                         t=permute(b, b.tensor(c0), (1, 0, 2)))
    b.need(not int(at.get("input_forget", 0)), "LSTM input_forget=1 is not supported")
    b.need("clip" not in at, "LSTM clip is not supported")
    acts = [_s(a) for a in at.get("activations", [])]
    b.need(all(a == d for a, d in zip(acts, ["Sigmoid", "Tanh", "Tanh"] * 2)),
           f"LSTM activations {acts} (only the default Sigmoid, Tanh, Tanh)")
    b.need_value(W.is_const and R.is_const and (B is None or B.is_const) and (P is None or P.is_const),
           "LSTM weights must be known at load time", W, R, B, P)
    direction = _s(at.get("direction", "forward"))
    T, N, _ = X.shape
    nd, H4, _ = W.shape
    Hs = H4 // 4
    b.need(int(at.get("hidden_size", Hs)) == Hs, "hidden_size does not match W")
    if seq_lens is not None:
        lens = np.asarray(cval(b, seq_lens, "sequence_lens"))
        b.need((lens == T).all(), "LSTM sequence_lens shorter than the sequence are not supported")
    c = b.ctx
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
    b.need(len(dirs) == nd, f"W has {nd} directions for direction={direction}")
    xt = reshape(b, b.tensor(X), (T * N, X.shape[2]))  # ne [input, T*N]
    ys, hs, cs = [], [], []
    for d, rev in enumerate(dirs):
        Wd = np.ascontiguousarray(W.const[d], dtype=np.float32)  # (4H, input): ggml ne [input, 4H]
        Rd = np.ascontiguousarray(R.const[d], dtype=np.float32)
        bias = np.zeros(4 * Hs, np.float32) if B is None else (B.const[d][:4 * Hs] + B.const[d][4 * Hs:]).astype(np.float32)
        kern = b.kernels
        if kern is not None and kern.lstm is not None and kern.linear_packed is not None:
            # every step's input projection with both biases as one packed product (not a product, then an add)
            xw = b.kernel_node(kern.linear_packed(c, b.weight(kern.pack_linear(np.ascontiguousarray(Wd.T))), xt,
                                                  4 * Hs, b.weight(bias)), "linear")
        else:
            xw = onnx_lib.ggml_add(c, onnx_lib.ggml_mul_mat(c, b.weight(Wd), xt), b.weight(bias))  # ne [4H, T*N]
        wr = b.weight(Rd)
        if h0 is not None:
            h = cont(b, onnx_lib.ggml_view_2d(c, reshape(b, b.tensor(h0), (nd * N, Hs)), Hs, N,
                                         Hs * 4, d * N * Hs * 4))
        else:
            h = b.weight(np.zeros((N, Hs), np.float32))
        if c0 is not None:
            cc = cont(b, onnx_lib.ggml_view_2d(c, reshape(b, b.tensor(c0), (nd * N, Hs)), Hs, N,
                                          Hs * 4, d * N * Hs * 4))
        else:
            cc = b.weight(np.zeros((N, Hs), np.float32))
        if kern is not None and kern.lstm is not None:  # ggml's CPU backend: the whole sequence as rnn.c's one node
            peeps = None if P is None else b.weight(np.ascontiguousarray(P.const[d], np.float32))
            seq = kern.lstm(c, cont(b, xw), b.weight(np.ascontiguousarray(Rd.T)), cont(b, h), cont(b, cc), peeps, rev)
            b.kernel_node(seq, "lstm")
            slice_bytes = Hs * N * 4
            ys.append(onnx_lib.ggml_view_4d(c, seq, Hs, N, 1, T, Hs * 4, slice_bytes, slice_bytes, 0))
            hs.append(onnx_lib.ggml_view_2d(c, seq, Hs, N, Hs * 4, (0 if rev else T - 1) * slice_bytes))
            cs.append(onnx_lib.ggml_view_2d(c, seq, Hs, N, Hs * 4, T * slice_bytes))
            continue
        peep = None if P is None else [b.weight(np.ascontiguousarray(P.const[d][k * Hs:(k + 1) * Hs], np.float32))
                                       for k in range(3)]  # i, o, f
        out = [None] * T
        for t in (range(T - 1, -1, -1) if rev else range(T)):
            g = onnx_lib.ggml_view_2d(c, xw, 4 * Hs, N, xw.nb[1], t * N * int(xw.nb[1]))
            g = onnx_lib.ggml_add(c, cont(b, g), onnx_lib.ggml_mul_mat(c, wr, h))  # ne [4H, N]

            def gate(k):
                return cont(b, onnx_lib.ggml_view_2d(c, g, Hs, N, g.nb[1], k * Hs * 4))
            gi, go, gf, gc = gate(0), gate(1), gate(2), gate(3)
            if peep is not None:
                gi = onnx_lib.ggml_add(c, gi, onnx_lib.ggml_mul(c, cc, peep[0]))
                gf = onnx_lib.ggml_add(c, gf, onnx_lib.ggml_mul(c, cc, peep[2]))
            i_, f_ = onnx_lib.ggml_sigmoid(c, gi), onnx_lib.ggml_sigmoid(c, gf)
            cc = onnx_lib.ggml_add(c, onnx_lib.ggml_mul(c, f_, cc), onnx_lib.ggml_mul(c, i_, onnx_lib.ggml_tanh(c, gc)))
            if peep is not None:
                go = onnx_lib.ggml_add(c, go, onnx_lib.ggml_mul(c, cc, peep[1]))
            h = onnx_lib.ggml_mul(c, onnx_lib.ggml_sigmoid(c, go), onnx_lib.ggml_tanh(c, cc))
            out[t] = h
        y = out[0]
        for t in range(1, T):
            y = onnx_lib.ggml_concat(c, y, out[t], 2)  # ne [H, N, T] after reshaping each step to [H, N, 1]
        ys.append(onnx_lib.ggml_reshape_4d(c, cont(b, y), Hs, N, 1, T))
        hs.append(h)
        cs.append(cc)
    Y = ys[0]
    Yh, Yc = hs[0], cs[0]
    for d in range(1, nd):
        Y = onnx_lib.ggml_concat(c, Y, ys[d], 2)
        Yh = onnx_lib.ggml_concat(c, onnx_lib.ggml_reshape_3d(c, Yh, Hs, N, d), onnx_lib.ggml_reshape_3d(c, hs[d], Hs, N, 1), 2)
        Yc = onnx_lib.ggml_concat(c, onnx_lib.ggml_reshape_3d(c, Yc, Hs, N, d), onnx_lib.ggml_reshape_3d(c, cs[d], Hs, N, 1), 2)
    dt = X.dtype if X.dtype != TensorProto.DOUBLE else TensorProto.FLOAT
    Yh, Yc = reshape(b, Yh, (nd, N, Hs)), reshape(b, Yc, (nd, N, Hs))
    if batch_first:
        outs = [b.out(permute(b, Y, (2, 0, 1, 3)), (N, T, nd, Hs), dt),
                b.out(permute(b, Yh, (1, 0, 2)), (N, nd, Hs), dt), b.out(permute(b, Yc, (1, 0, 2)), (N, nd, Hs), dt)]
    else:
        outs = [b.out(Y, (T, nd, N, Hs), dt), b.out(Yh, (nd, N, Hs), dt), b.out(Yc, (nd, N, Hs), dt)]
    return outs[:len(node.output)]


def _recurrent(b, node, ins, at, n_gates, step, name):
    """GRU and RNN: the same unrolling as LSTM, with `step(g_x, h, d) -> h` per time step, where g_x is
    the input projection of the step (ne [n_gates * H, N], biases of W included)."""
    ins = list(ins) + [None] * (6 - len(ins))
    X, W, R, B, seq_lens, h0 = ins[:6]
    batch_first = int(at.get("layout", 0)) == 1
    if batch_first:
        X = Val((X.shape[1], X.shape[0], X.shape[2]), X.dtype, t=permute(b, b.tensor(X), (1, 0, 2)))
        h0 = None if h0 is None else Val((h0.shape[1], h0.shape[0], h0.shape[2]), h0.dtype,
                                         t=permute(b, b.tensor(h0), (1, 0, 2)))
    b.need("clip" not in at, f"{name} clip is not supported")
    b.need_value(W.is_const and R.is_const and (B is None or B.is_const), f"{name} weights must be known at load time",
                 W, R, B)
    direction = _s(at.get("direction", "forward"))
    T, N, _ = X.shape
    nd, HG, _ = W.shape
    Hs = HG // n_gates
    if seq_lens is not None:
        lens = np.asarray(cval(b, seq_lens, "sequence_lens"))
        b.need((lens == T).all(), f"{name} sequence_lens shorter than the sequence are not supported")
    c = b.ctx
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]
    b.need(len(dirs) == nd, f"W has {nd} directions for direction={direction}")
    xt = reshape(b, b.tensor(X), (T * N, X.shape[2]))
    ys, hs = [], []
    for d, rev in enumerate(dirs):
        wb = np.zeros(HG, np.float32) if B is None else B.const[d][:HG].astype(np.float32)
        rb = np.zeros(HG, np.float32) if B is None else B.const[d][HG:].astype(np.float32)
        xw = onnx_lib.ggml_add(c, onnx_lib.ggml_mul_mat(c, b.weight(np.ascontiguousarray(W.const[d], np.float32)), xt),
                          b.weight(wb))
        Rd = np.ascontiguousarray(R.const[d], np.float32)
        if h0 is not None:
            h = cont(b, onnx_lib.ggml_view_2d(c, reshape(b, b.tensor(h0), (nd * N, Hs)), Hs, N, Hs * 4, d * N * Hs * 4))
        else:
            h = b.weight(np.zeros((N, Hs), np.float32))
        out = [None] * T
        for t in (range(T - 1, -1, -1) if rev else range(T)):
            g = cont(b, onnx_lib.ggml_view_2d(c, xw, HG, N, xw.nb[1], t * N * int(xw.nb[1])))
            h = step(g, h, Rd, rb, Hs)
            out[t] = h
        y = out[0]
        for t in range(1, T):
            y = onnx_lib.ggml_concat(c, y, out[t], 2)
        ys.append(onnx_lib.ggml_reshape_4d(c, cont(b, y), Hs, N, 1, T))
        hs.append(h)
    Y, Yh = ys[0], hs[0]
    for d in range(1, nd):
        Y = onnx_lib.ggml_concat(c, Y, ys[d], 2)
        Yh = onnx_lib.ggml_concat(c, onnx_lib.ggml_reshape_3d(c, Yh, Hs, N, d), onnx_lib.ggml_reshape_3d(c, hs[d], Hs, N, 1), 2)
    dt = X.dtype
    Yh = reshape(b, Yh, (nd, N, Hs))
    if batch_first:
        outs = [b.out(permute(b, Y, (2, 0, 1, 3)), (N, T, nd, Hs), dt), b.out(permute(b, Yh, (1, 0, 2)), (N, nd, Hs), dt)]
    else:
        outs = [b.out(Y, (T, nd, N, Hs), dt), b.out(Yh, (nd, N, Hs), dt)]
    return outs[:len(node.output)]


def _default_acts(b, at, want, name):
    acts = [_s(a) for a in at.get("activations", [])]
    b.need(all(a == w for a, w in zip(acts, want * 2)), f"{name} activations {acts} (only the defaults {want})")


@op("GRU", const_inputs=(1, 2, 3, 4))
def _gru(b, node, ins, at):
    _default_acts(b, at, ["Sigmoid", "Tanh"], "GRU")
    lbr = int(at.get("linear_before_reset", 0))
    c = b.ctx

    weights = {}  # per direction: made once, not once per step

    def step(g, h, Rd, rb, Hs):
        def part(t, k):
            return cont(b, onnx_lib.ggml_view_2d(c, t, Hs, int(t.ne[1]), t.nb[1], k * Hs * 4))
        if id(Rd) not in weights:
            weights[id(Rd)] = (b.weight(np.ascontiguousarray(Rd[:2 * Hs])), b.weight(rb[:2 * Hs]),
                               b.weight(np.ascontiguousarray(Rd[2 * Hs:])), b.weight(rb[2 * Hs:]), Rd)
        Rzr, rbzr, Rh, rbh, _ = weights[id(Rd)]
        rz = onnx_lib.ggml_add(c, onnx_lib.ggml_mul_mat(c, Rzr, h), rbzr)  # z, r
        z = onnx_lib.ggml_sigmoid(c, onnx_lib.ggml_add(c, part(g, 0), part(rz, 0)))
        r = onnx_lib.ggml_sigmoid(c, onnx_lib.ggml_add(c, part(g, 1), part(rz, 1)))
        if lbr:
            hh = onnx_lib.ggml_mul(c, r, onnx_lib.ggml_add(c, onnx_lib.ggml_mul_mat(c, Rh, h), rbh))
        else:
            hh = onnx_lib.ggml_add(c, onnx_lib.ggml_mul_mat(c, Rh, onnx_lib.ggml_mul(c, r, h)), rbh)
        ht = onnx_lib.ggml_tanh(c, onnx_lib.ggml_add(c, part(g, 2), hh))
        return onnx_lib.ggml_add(c, ht, onnx_lib.ggml_mul(c, z, onnx_lib.ggml_sub(c, h, ht)))  # (1 - z) ht + z h
    return _recurrent(b, node, ins, at, 3, step, "GRU")


@op("RNN", const_inputs=(1, 2, 3, 4))
def _rnn(b, node, ins, at):
    _default_acts(b, at, ["Tanh"], "RNN")
    c = b.ctx

    def step(g, h, Rd, rb, Hs):
        return onnx_lib.ggml_tanh(c, onnx_lib.ggml_add(c, onnx_lib.ggml_add(c, g, onnx_lib.ggml_mul_mat(c, b.weight(Rd), h)), b.weight(rb)))
    return _recurrent(b, node, ins, at, 1, step, "RNN")
