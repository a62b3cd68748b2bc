"""An independent numpy reference for the Keras-like models, written from the semantics in
tests/parity/README.md ("Suite keras"), in float64, samples as rows (R's orientation).

It knows nothing of ggml: weights are given as {layer: {param: array}} with the array's shape
the ggml ne reversed (so `w[o, i]` is ggml's `weight[i, o]`). Used by the keras parity runner
for the cases where ggmlR is wrong, and by the tests for every layer's forward pass.
"""
from __future__ import annotations

import numpy as np


def act(x, name):
    if name in (None, "linear"):
        return x
    if name == "relu":
        return np.maximum(x, 0)
    if name == "sigmoid":
        return 1 / (1 + np.exp(-x))
    if name == "tanh":
        return np.tanh(x)
    if name == "silu":
        return x / (1 + np.exp(-x))
    if name == "gelu":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    if name == "hardsigmoid":
        return np.clip(x / 6 + 0.5, 0, 1)
    if name == "hardswish":
        return x * np.clip(x / 6 + 0.5, 0, 1)
    if name == "softmax":
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    raise ValueError(name)


def flatten(h):
    """ggml order: images (N, H, W, C) -> index w + W*(h + H*c); (N, T, C) -> c + C*t."""
    if h.ndim == 4:
        h = h.transpose(0, 3, 1, 2)
    return h.reshape(h.shape[0], -1)


def conv2d(x, kernel, bias, strides, pads, a):
    """x (N, H, W, C); kernel numpy (OC, C, KH, KW) = ggml [KW, KH, C, OC];
    pads (top, bottom, left, right) of zeros."""
    n, hh, ww, c = x.shape
    oc, _, kh, kw = kernel.shape
    sh, sw = strides
    pt, pb, pl, pr = pads
    xp = np.zeros((n, hh + pt + pb, ww + pl + pr, c))
    xp[:, pt:pt + hh, pl:pl + ww] = x
    oh, ow = (hh + pt + pb - kh) // sh + 1, (ww + pl + pr - kw) // sw + 1
    out = np.zeros((n, oh, ow, oc))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * sh:i * sh + kh, j * sw:j * sw + kw, :]          # (N, KH, KW, C)
            out[:, i, j, :] = np.einsum("nhwc,ochw->no", patch, kernel)
    return act(out + bias, a)


def conv1d(x, kernel, bias, stride, pad, a):
    """x (N, L, C); kernel numpy (OC, K, C) = ggml [C, K, OC]; cross-correlation; pad is the
    zeros on each side, or (before, after)."""
    n, L, c = x.shape
    oc, k, _ = kernel.shape
    pl, pr = (pad, pad) if np.isscalar(pad) else pad
    xp = np.zeros((n, L + pl + pr, c))
    xp[:, pl:pl + L] = x
    ol = (L + pl + pr - k) // stride + 1
    out = np.zeros((n, ol, oc))
    for i in range(ol):
        out[:, i, :] = np.einsum("nkc,okc->no", xp[:, i * stride:i * stride + k, :], kernel)
    return act(out + bias, a)


def maxpool(x, pool, strides):
    n, hh, ww, c = x.shape
    (ph, pw), (sh, sw) = pool, strides
    oh, ow = (hh - ph) // sh + 1, (ww - pw) // sw + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            out[:, i, j] = x[:, i * sh:i * sh + ph, j * sw:j * sw + pw].max(axis=(1, 2))
    return out


def rms_batch_norm(x, gamma, beta, eps):
    """ggmlR's batch_norm: RMS over ggml's first axis (features; the W axis of images)."""
    if x.ndim == 4:   # (N, H, W, C): normalise over W for every (n, h, c)
        y = x / np.sqrt(np.mean(x ** 2, axis=2, keepdims=True) + eps)
        return y * gamma + beta
    if x.ndim == 3:   # (N, T, C): over C
        return x / np.sqrt(np.mean(x ** 2, axis=2, keepdims=True) + eps) * gamma + beta
    return x / np.sqrt(np.mean(x ** 2, axis=1, keepdims=True) + eps) * gamma + beta


def lstm(x, w, units, a="tanh", ra="sigmoid", return_sequences=False):
    """x (N, T, C); W_gates numpy (4u, C): gate blocks i, f, g, o."""
    n, t, _ = x.shape
    u = units
    h, c = np.zeros((n, u)), np.zeros((n, u))
    hs = []
    for s in range(t):
        g = x[:, s] @ w["W_gates"].T + h @ w["U_gates"].T + w["b_gates"]
        i, f, gg, o = act(g[:, :u], ra), act(g[:, u:2 * u], ra), act(g[:, 2 * u:3 * u], a), act(g[:, 3 * u:], ra)
        c = f * c + i * gg
        h = o * act(c, a)
        hs.append(h)
    return np.stack(hs, axis=1) if return_sequences else h


def gru(x, w, units, a="tanh", ra="sigmoid", return_sequences=False):
    n, t, _ = x.shape
    u = units
    h = np.zeros((n, u))
    hs = []
    for s in range(t):
        zr = x[:, s] @ w["W_zh"].T + h @ w["U_zh"].T + w["b_zh"]
        z, r = act(zr[:, :u], ra), act(zr[:, u:], ra)
        nn = act(x[:, s] @ w["W_n"].T + (r * h) @ w["U_n"].T + w["b_n"], a)
        h = h + z * (nn - h)
        hs.append(h)
    return np.stack(hs, axis=1) if return_sequences else h


def embedding(ids, weight):
    """ids (N, T) 0-based; weight numpy (vocab, dim) -> (N, T, dim)."""
    return weight[np.asarray(ids, dtype=np.int64)].astype(np.float64)


def layer_forward(kind, cfg, w, xs, training=False):
    """One layer (inference mode unless `training`: dropout then scales by 1 - rate, ggmlR's
    deterministic dropout); xs is the list of its inputs (R orientation)."""
    w = {k: np.asarray(v, np.float64) for k, v in (w or {}).items()}
    x = xs[0]
    if kind == "dense":
        return act(x @ w["weight"].T + w["bias"], cfg.get("activation"))
    if kind == "flatten":
        return flatten(x)
    if kind == "conv_2d":
        pads = [0, 0, 0, 0]
        if cfg.get("padding") == "same":
            # ggmlR's floor(K/2) each side for odd kernels; Keras' padding for even ones
            pads = []
            for k, n, st in zip(cfg["kernel_size"], x.shape[1:3], cfg["strides"]):
                total = max((int(np.ceil(n / st)) - 1) * st + k - n, 0)
                pads += [k // 2, k // 2] if k % 2 else [total // 2, total - total // 2]
        return conv2d(x, w["kernel"], w["bias"], cfg["strides"], pads, cfg.get("activation"))
    if kind == "conv_1d":
        k, st, L = cfg["kernel_size"], cfg["strides"], x.shape[1]
        pad = 0
        if cfg.get("padding") == "same":   # ggmlR's floor(K/2) each side for odd kernels; Keras' for even ones
            total = max((int(np.ceil(L / st)) - 1) * st + k - L, 0)
            pad = k // 2 if k % 2 else (total // 2, total - total // 2)
        return conv1d(x, w["kernel"], w["bias"], cfg["strides"], pad, cfg.get("activation"))
    if kind == "max_pooling_2d":
        return maxpool(x, cfg["pool_size"], cfg["strides"])
    if kind == "global_average_pooling_2d":
        return x.mean(axis=(1, 2))
    if kind == "global_max_pooling_2d":
        return x.max(axis=(1, 2))
    if kind == "batch_norm" and cfg.get("mode") == "batch":   # a true batch norm (per feature/channel)
        if training:
            axes = tuple(range(x.ndim - 1))
            mu, var = x.mean(axis=axes), x.var(axis=axes)
        else:
            mu, var = w["running_mean"], w["running_var"]
        return (x - mu) / np.sqrt(var + cfg["eps"]) * w["gamma"] + w["beta"]
    if kind == "batch_norm":
        return rms_batch_norm(x, w["gamma"], w["beta"], cfg["eps"])
    if kind == "dropout":
        return x * (1 - cfg["rate"]) if training else x
    if kind == "embedding":
        return embedding(x, w["weight"])
    if kind == "lstm":
        return lstm(x, w, cfg["units"], cfg["activation"], cfg["recurrent_activation"], cfg["return_sequences"])
    if kind == "gru":
        return gru(x, w, cfg["units"], cfg["activation"], cfg["recurrent_activation"], cfg["return_sequences"])
    if kind == "add":
        return sum(xs)
    if kind == "concatenate":
        # a 0-based ggml axis on flat samples is the feature axis
        return np.concatenate([v.reshape(v.shape[0], -1) for v in xs], axis=1)
    raise ValueError(kind)


# -- training ------------------------------------------------------------------------------------------
def fd_grad(loss_fn, W, h=1e-6):
    """Central finite differences of loss_fn(W) for every weight element (float64)."""
    g = {}
    for n, params in W.items():
        g[n] = {}
        for k, v in params.items():
            gk = np.zeros_like(v)
            flat, gflat = v.reshape(-1), gk.reshape(-1)
            for j in range(flat.size):
                old = flat[j]
                flat[j] = old + h
                lp = loss_fn(W)
                flat[j] = old - h
                lm = loss_fn(W)
                flat[j] = old
                gflat[j] = (lp - lm) / (2 * h)
            g[n][k] = gk
    return g


def ggml_opt_loss(out, y, loss, w=None):
    """ggml_opt's batch losses: mse = sum((out - y)^2)/(B K) (weighted per sample when w is
    given); cross_entropy = -(1/B) sum y * log_softmax(out); cross_entropy_of_probabilities =
    -(1/B) sum y * log(out), for a softmax output (what ggml computes from its logits)."""
    if loss == "mse":
        w = np.ones(len(out)) if w is None else w
        return float(np.sum(w[:, None] * (out - y) ** 2) / out.size)
    if loss == "cross_entropy_of_probabilities":   # `out` is a softmax output: the true CE
        return float(-np.sum(y * np.log(out)) / len(out))
    ls = out - out.max(axis=1, keepdims=True)
    ls = ls - np.log(np.exp(ls).sum(axis=1, keepdims=True))
    return float(-np.sum(y * ls) / len(out))


def train_reference(forward, weights, trainable, x, y, order, batch, n_train, epochs, loss, optimizer,
                    lr=1e-3, b1=0.9, b2=0.999, eps=1e-8, sample_weight=None, only=None):
    """What ggml_opt computes, by finite differences: per epoch, batches of `batch` rows of
    order[e][:n_train] take one optimizer step each (batch loss before the step recorded), the
    remaining rows are validation batches. forward(W, x_rows) -> outputs [B, K] (training mode);
    x may be a list of inputs. Only layers named in `trainable` move.
    Returns ([(train_loss, val_loss)] per epoch, final weights)."""
    W = {n: {k: np.asarray(v, np.float64).copy() for k, v in weights[n].items()} for n in weights}
    # the arrays that train: every weight of the trainable layers, or those named in `only`
    T = {n: {k: W[n][k] for k in (only[n] if only is not None else W[n])} for n in trainable}
    m = {n: {k: np.zeros_like(v) for k, v in T[n].items()} for n in T}
    v = {n: {k: np.zeros_like(v) for k, v in T[n].items()} for n in T}
    sw = None if sample_weight is None else np.asarray(sample_weight, np.float64)
    xs = x if isinstance(x, list) else [x]
    t = 0
    rows = []
    for e in range(epochs):
        idx = np.asarray(order[e])
        tr, va = [], []
        for s in range(0, len(idx), batch):
            bi = idx[s:s + batch]
            xb = [a[bi] for a in xs]
            xb = xb if isinstance(x, list) else xb[0]
            wb = None if sw is None else sw[bi]

            def lf(_W, xb=xb, bi=bi, wb=wb):
                return ggml_opt_loss(forward(W, xb), y[bi], loss, wb)
            lval = lf(W)
            if s >= n_train:
                va.append(lval)
                continue
            tr.append(lval)
            t += 1
            g = fd_grad(lf, T)
            for n in T:
                for k in T[n]:
                    if optimizer == "sgd":
                        T[n][k] -= lr * g[n][k]
                    else:
                        m[n][k] = b1 * m[n][k] + (1 - b1) * g[n][k]
                        v[n][k] = b2 * v[n][k] + (1 - b2) * g[n][k] ** 2
                        T[n][k] -= lr * (m[n][k] / (1 - b1 ** t)) / (np.sqrt(v[n][k] / (1 - b2 ** t)) + eps)
        rows.append((float(np.mean(tr)), float(np.mean(va)) if va else None))
    return rows, W
