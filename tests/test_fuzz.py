"""Random, mostly invalid, call sequences into the low-level API must never kill the process.

A failed ggml assertion aborts the interpreter, so the fuzz loop runs in a child process: this
file run as a script. The test asserts the child exits 0 after printing its completion marker,
and on a crash prints the steps of the example that was running (the child logs each call
before making it). Every call must succeed or raise one of ALLOWED; anything else is reported
by hypothesis as a falsifying example. Allowed: GGMLError, ValueError, TypeError, MemoryError,
OverflowError (cffi's, for an int that does not fit a C argument).

Each example mixes random calls (see SPECS: every op, arguments of every kind, often invalid)
with near-valid ones (`recipe`: fitting shapes, then one argument spoiled), which are what reach
the kernels; then it computes everything it built.

    python tests/test_fuzz.py [N_EXAMPLES] [SEED]     # run the fuzz loop directly
    GGMLPY_FUZZ_EXAMPLES=5000 GGMLPY_FUZZ_SEED=7 python -m pytest tests/test_fuzz.py
"""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "FUZZ-COMPLETE"
N_EXAMPLES = int(os.environ.get("GGMLPY_FUZZ_EXAMPLES", 1000))  # about 15 s
SEED = int(os.environ.get("GGMLPY_FUZZ_SEED", 20250325))

# Argument kinds: T tensor, O optional tensor, i small int/dim, n byte count (strides, offsets),
# a axis, f float, y ggml type, p pool op, b bool.
UNARY = ["abs", "neg", "sqr", "sqrt", "exp", "log", "sin", "cos", "step", "sgn", "relu", "gelu", "gelu_erf",
         "gelu_quick", "silu", "sigmoid", "tanh", "elu", "hardswish", "hardsigmoid", "softplus", "expm1",
         "floor", "ceil", "round", "trunc", "soft_max", "sum", "sum_rows", "mean", "argmax", "transpose",
         "cont", "dup"]
SPECS = {
    **{f"ggml_{n}": "T" for n in UNARY},
    **{f"ggml_{n}": "TT" for n in ["add", "sub", "mul", "div", "silu_back", "mul_mat", "out_prod", "count_equal",
                                   "reshape", "cpy", "get_rows", "repeat", "repeat_back"]},
    **{f"ggml_{n}": "Tf" for n in ["leaky_relu", "scale", "norm", "rms_norm", "l2_norm"]},
    "ggml_clamp": "Tff", "ggml_soft_max_ext": "TOff", "ggml_soft_max_ext_back": "TTff",
    "ggml_rms_norm_back": "TTf", "ggml_group_norm": "Tif",
    "ggml_reshape_1d": "Ti", "ggml_reshape_2d": "Tii", "ggml_reshape_3d": "Tiii", "ggml_reshape_4d": "Tiiii",
    "ggml_reshape_5d": "Tiiiii",
    "ggml_view_1d": "Tin", "ggml_view_2d": "Tiinn", "ggml_view_3d": "Tiiinnn", "ggml_view_4d": "Tiiiinnnn",
    "ggml_permute": "Taaaa", "ggml_cast": "Ty", "ggml_concat": "TTa", "ggml_get_rows_back": "TTT",
    "ggml_pad": "Tiiii", "ggml_acc": "TTnnnn",
    "ggml_im2col": "TTiiiiiib", "ggml_conv_2d": "TTiiiiii", "ggml_pool_1d": "Tpiii", "ggml_pool_2d": "Tpiiiiii",
    "ggml_upscale": "Tii", "ggml_diag_mask_inf": "Ti", "ggml_rope_ext": "TTOii",
    "ggml_flash_attn_ext": "TTTOf", "ggml_argsort": "Ti", "ggml_top_k": "Ti",
    # GLU, RoPE variants, convolutions, small ops (s: a list of 4 rope sections, often wrong)
    "ggml_glu": "Tib", "ggml_glu_split": "TTi",
    **{f"ggml_{n}": "T" for n in ["reglu", "geglu", "swiglu", "geglu_erf", "geglu_quick", "diag"]},
    **{f"ggml_{n}_split": "TT" for n in ["reglu", "geglu", "swiglu", "geglu_erf", "geglu_quick"]},
    "ggml_rope": "TTii", "ggml_rope_ext_back": "TTOii", "ggml_rope_multi": "TTOisi",
    "ggml_add1": "TT", "ggml_diag_mask_zero": "Ti", "ggml_arange": "fff", "ggml_timestep_embedding": "Tii",
    "ggml_roll": "Tiiii", "ggml_pad_reflect_1d": "Tii", "ggml_win_part": "Ti", "ggml_win_unpart": "Tiii",
    "ggml_get_rel_pos": "Tii", "ggml_add_rel_pos": "TTT", "ggml_mul_mat_id": "TTT",
    "ggml_set": "TTnnnn", "ggml_set_1d": "TTn", "ggml_set_2d": "TTnn",
    **{f"ggml_{n}": "TTiii" for n in ["conv_1d", "conv_1d_dw", "conv_transpose_1d"]},
    **{f"ggml_{n}": "TTiiiiii" for n in ["conv_2d_dw", "conv_2d_dw_direct", "conv_2d_direct"]},
    "ggml_conv_transpose_2d_p0": "TTi", "ggml_flash_attn_back": "TTTTb",
}
from ggmlpy.core.ops.inplace import INPLACE  # noqa: E402  (every *_inplace variant takes its base op's arguments)
SPECS.update({f"ggml_{n}_inplace": SPECS[f"ggml_{n}"] for n in INPLACE})


def test_specs_cover_every_op():
    from ggmlpy.core import ops
    assert set(SPECS) == set(ops.OPS)


def test_fuzz_never_aborts():
    pytest.importorskip("hypothesis")
    # GGML_NO_BACKTRACE: on an abort ggml would otherwise attach gdb to print a backtrace
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), str(N_EXAMPLES), str(SEED)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    out = proc.stdout
    if proc.returncode != 0 or MARKER not in out:
        last = out[out.rfind("=== example"):]  # the calls of the example that was running
        last = "\n".join(line for line in last.splitlines() if line.startswith(("===", "  ")))
        pytest.fail(f"fuzz child exited with {proc.returncode} (negative: killed by that signal)\n"
                    f"--- last example ---\n{last[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}")
    print(out[out.rfind("stats:"):])


# -- the child ---------------------------------------------------------------------------------------------------
def main(n_examples: int, seed: int) -> None:
    from collections import Counter

    import numpy as np
    from hypothesis import HealthCheck, given, settings, strategies as st
    from hypothesis import seed as hseed

    import ggmlpy as g
    from ggmlpy import GGMLError
    from ggmlpy.bindings import lib

    allowed = (GGMLError, ValueError, TypeError, MemoryError, OverflowError)
    types = [g.GGML_TYPE_F32] * 6 + [g.GGML_TYPE_F16, g.GGML_TYPE_F16, g.GGML_TYPE_I32, g.GGML_TYPE_I32,
                                     g.GGML_TYPE_BF16, g.GGML_TYPE_I16, g.GGML_TYPE_I8]
    garbage = st.sampled_from([None, "2", 1.5, float("nan"), [1], -1])
    stats = Counter()
    state = {"example": 0}

    class Fuzz:
        def __init__(self, data):
            self.data = data
            self.rng = np.random.default_rng(self.draw(st.integers(0, 2**32 - 1), "rng"))
            self.pool, self.names = [], {}
            self.ints = {1, 2, 3, 4}  # dims seen so far: reused so that shapes match often
            self.backend, self.gallocs = None, []
            self.ctxs = [g.ggml_init(4 << 20),
                         g.ggml_init(self.draw(st.sampled_from([512, 2048, 8192, 65536]), "tiny")),
                         g.ggml_init(1 << 20, no_alloc=True)]

        # -- drawing --------------------------------------------------------------------------------
        def draw(self, strategy, label):
            return self.data.draw(strategy, label=label)

        def pick(self, options, label):
            return self.draw(st.sampled_from(options), label)

        def odds(self, n):  # True one time in n
            return self.draw(st.integers(0, n - 1), "odds") == 0

        def int_(self):
            r = self.draw(st.integers(0, 19), "int-kind")
            if r < 9:
                return self.draw(st.integers(-1, 6), "int")
            if r < 16:
                return self.pick(sorted(self.ints), "known-int")
            if r < 19:
                return self.pick([0, 7, 16, 64, 2**31 - 1, -2**31, 2**40, 2**63], "big-int")
            return self.draw(garbage, "garbage")

        def nbytes(self):
            r = self.draw(st.integers(0, 9), "n-kind")
            if r < 7:
                return 4 * self.pick(sorted(self.ints | {0, 5, 8}), "n-known") * self.pick([1, 1, 2, 3], "mult")
            if r < 9:
                return self.pick([-4, 1, 2, 6, 1 << 20, 2**62], "n-odd")
            return self.draw(garbage, "garbage")

        def float_(self):
            if self.odds(8):
                return self.pick([float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e30, None, "x"], "bad-float")
            return self.draw(st.floats(-4, 4), "float")

        def tensor(self, optional=False):
            if optional and self.odds(2):
                return None
            if not self.pool or self.odds(25):
                return self.draw(garbage, "garbage") if self.odds(2) else np.zeros(3, np.float32)
            return self.pool[self.draw(st.integers(0, len(self.pool) - 1), "tensor")]

        def arg(self, kind):
            return {"T": self.tensor, "O": lambda: self.tensor(True), "i": self.int_, "n": self.nbytes,
                    "a": lambda: self.draw(st.integers(-1, 4), "axis"), "f": self.float_,
                    "y": lambda: self.pick(types + [999], "type"), "b": lambda: self.odds(4) is False,
                    "s": lambda: [self.draw(st.integers(-1, 4), "sec") for _ in range(self.pick([4, 4, 4, 3], "n-sec"))],
                    "p": lambda: self.pick(["max", "avg", 0, 1, 9, "sum"], "pool-op")}[kind]()

        def ctx(self):
            return self.ctxs[self.pick([0, 0, 0, 0, 1, 2], "ctx")]

        # -- calling -------------------------------------------------------------------------------
        def fmt(self, x):
            if isinstance(x, g.Tensor):
                return self.names.get(x, "t?")
            if isinstance(x, g.Context):
                return f"ctx{self.ctxs.index(x)}" if x in self.ctxs else "ctx?"
            return type(x).__name__ + str(list(x.shape)) if isinstance(x, np.ndarray) else repr(x)

        def call(self, fn, *args, **kw):
            name = getattr(fn, "__name__", str(fn))
            print(f"  {name}({', '.join(self.fmt(a) for a in args)}{', ' if kw else ''}"
                  f"{', '.join(f'{k}={v!r}' for k, v in kw.items())})", flush=True)
            try:
                out = fn(*args, **kw)
            except allowed as e:
                stats[f"{name}: {type(e).__name__}"] += 1
                return None
            stats[f"{name}: ok"] += 1
            if isinstance(out, g.Tensor) and out not in self.names:
                self.names[out] = f"t{len(self.pool)}"
                self.pool.append(out)
                print(f"    -> {self.names[out]} = {out!r}", flush=True)
                if out.ctx.alive:
                    self.ints.update(d for d in out.ne if 0 < d < 64)
                    self.ints.add(min(out.nelements(), 10**6))
            return out

        # -- actions -------------------------------------------------------------------------------
        def new_tensor(self):
            n_dims = self.pick([1, 2, 2, 3, 4, 0, 5], "n_dims")
            ne = [self.pick([1, 2, 3, 4, 4, 8], "dim") if not self.odds(12) else self.int_()
                  for _ in range(max(n_dims, 0) + (1 if self.odds(15) else 0))]
            t = self.call(g.ggml_new_tensor, self.ctx(), self.pick(types + [999, None], "type"), n_dims, ne)
            if t is not None and t.ctx.alive and t.is_allocated:
                n = t.nelements()
                vals = (self.rng.integers(-1 if self.odds(6) else 0, 5, n) if t.type == g.GGML_TYPE_I32
                        else self.rng.normal(size=n))
                self.call(g.ggml_set_f32, t, vals)

        def from_numpy(self):
            shape = tuple(self.pick([1, 2, 3, 4], "dim") for _ in range(self.pick([1, 2, 3, 4, 5, 0], "ndim")))
            dtype = self.pick(["float32", "float64", "int64", "bool", "complex64", "object"], "dtype")
            arr = np.ones(shape, dtype)
            self.call(g.ggml_new_from_numpy, self.ctx(), arr, *([self.pick(types, "type")] if self.odds(3) else []))

        def op(self):
            name = self.pick(sorted(SPECS), "op")
            ctx = self.ctx() if self.odds(10) else None
            args = [self.arg(k) for k in SPECS[name]]
            if ctx is None:  # usually the first tensor's own context
                ctx = args[0].ctx if isinstance(args[0], g.Tensor) else self.ctxs[0]
            if self.odds(30):
                ctx = self.pick([None, "ctx", self.ctxs[0]], "bad-ctx")
            self.call(getattr(g, name), ctx, *args)

        # -- near-valid calls: random ops rarely get shapes right, so build fitting inputs, then spoil some
        def dim(self, lo=1, hi=4):
            return self.draw(st.integers(lo, hi), "d")

        def mk(self, ne, type=None, lo=-3, hi=3):
            """A fresh tensor of ggml shape ne in the main context (values in lo..hi for i32)."""
            t = self.call(g.ggml_new_tensor, self.ctxs[0], type or g.GGML_TYPE_F32, len(ne), ne)
            if t is not None:
                n = t.nelements()
                self.call(g.ggml_set_f32, t, self.rng.integers(lo, hi, n) if t.type == g.GGML_TYPE_I32
                          else self.rng.normal(size=n))
            return t

        def idx(self, n, hi, shape=None):  # row indices, now and then out of range or computed
            r = self.draw(st.integers(0, 5), "idx-kind")
            t = self.mk(shape or [n], g.GGML_TYPE_I32, -1 if r == 0 else 0, hi + (r == 1))
            if r == 2 and t is not None and len(shape or [n]) == 1:
                return self.call(g.ggml_argsort, self.ctxs[0], self.mk([n]))  # values in 0..n-1
            if r == 3 and t is not None:
                return self.call(g.ggml_cont, self.ctxs[0], t)  # computed in the graph
            return t

        def recipe(self):
            d, c0 = self.dim, self.ctxs[0]
            f16 = g.GGML_TYPE_F16 if self.odds(3) else None
            name = self.pick(["get_rows", "get_rows_back", "rope_ext", "flash_attn_ext", "conv", "pool", "mul_mat",
                              "soft_max_ext", "reshape", "view", "top_k", "repeat_back", "acc",
                              "glu", "rope_multi", "conv1", "conv_dw", "mul_mat_id", "set", "window", "roll"], "recipe")
            if name == "get_rows":
                n0, n1, n2, k = d(), d(), d(1, 2), d()
                args = [self.mk([n0, n1, n2], f16), self.idx(k, n1, [k, n2] if n2 > 1 else None)]
            elif name == "get_rows_back":
                n0, n1, k = d(), d(), d()
                args = [self.mk([n0, k]), self.idx(k, n1), self.mk([n0, n1])]
            elif name == "rope_ext":
                hd, t = 2 * d(1, 4), d()
                args = [self.mk([hd, d(), t], f16), self.idx(t, 50), self.mk([hd]) if self.odds(3) else None,
                        self.pick([hd, hd // 2, 2, hd + 2, 3, 0], "n_dims"), self.pick([0, 2, 1], "mode")]
            elif name == "flash_attn_ext":
                D, Dv, nq, nkv, hkv, r = d(2, 8), d(2, 8), d(), d(), d(1, 2), d(1, 2)
                args = [self.mk([D, nq, hkv * r, 1]), self.mk([D, nkv, hkv, 1], f16), self.mk([Dv, nkv, hkv, 1], f16),
                        self.mk([nkv, nq + self.dim(0, 2)], g.GGML_TYPE_F16) if self.odds(2) else None,
                        self.draw(st.floats(0.01, 2), "scale")]
            elif name == "conv":
                C, k0, k1 = d(1, 3), d(1, 3), d(1, 3)
                strides = [self.dim(-1, 3) for _ in range(6)]
                name = self.pick(["conv_2d", "im2col"], "conv-op")
                args = [self.mk([k0, k1, C, d()], f16), self.mk([d(1, 8), d(1, 8), C, d(1, 2)]), *strides]
            elif name == "pool":
                name = self.pick(["pool_1d", "pool_2d"], "pool-op")
                ks = [self.dim(-1, 4) for _ in range(6 if name == "pool_2d" else 3)]
                args = [self.mk([d(1, 8), d(1, 8), d(1, 2)], f16), self.pick(["max", "avg"], "op"), *ks]
            elif name == "mul_mat":
                K, b2 = d(), d(1, 2)
                name = self.pick(["mul_mat", "out_prod"], "mm")
                args = ([self.mk([K, d(), b2, 1], f16), self.mk([K, d(), b2 * d(1, 2), 1])] if name == "mul_mat"
                        else [self.mk([d(), K, b2]), self.mk([d(), K, b2 * d(1, 2)])])
            elif name == "soft_max_ext":
                n0, n1, n2 = d(), d(), d(1, 3)
                args = [self.mk([n0, n1, n2]), self.mk([n0, n1 + self.dim(0, 1), self.pick([1, n2], "m2")], f16)
                        if self.odds(2) else None, self.draw(st.floats(0, 2), "scale"), self.pick([0.0, 8.0], "bias")]
            elif name == "reshape":
                x = self.mk([d(), d(), d()])
                n = x.nelements() if x is not None else 1
                k = self.pick([kk for kk in range(1, n + 1) if n % kk == 0], "factor")
                name, args = self.pick([("reshape_2d", [x, k, n // k]), ("reshape_3d", [x, 1, k, n // k]),
                                        ("reshape_4d", [x, n // k, 1, k, 1])], "reshape")
            elif name == "view":
                x = self.mk([d(2, 6), d(2, 6), d(1, 2)])
                name = self.pick(["view_2d", "view_4d"], "view")
                args = ([x, d(1, 3), d(1, 3), 4 * d(1, 6), 4 * self.dim(0, 3)] if name == "view_2d" else
                        [x, d(1, 2), d(1, 2), 1, d(1, 2), 4 * d(1, 6), 4 * d(4, 12), 4 * d(8, 20), 4 * self.dim(0, 3)])
            elif name == "top_k":
                n0 = d(1, 8)
                args = [self.mk([n0, d()]), self.dim(0, n0 + 1)]
            elif name == "repeat_back":
                s = [d(1, 3), d(1, 3)]
                args = [self.mk([s[0] * d(1, 2), s[1] * d(1, 2)]), self.mk(s)]
            elif name == "acc":
                x = self.mk([d(2, 6), d(2, 6)])
                args = [x, self.mk([d(1, 2), d(1, 2)]), 4 * d(2, 6), 4 * d(4, 36), 4 * d(4, 36), 4 * self.dim(0, 8)]
            elif name == "glu":
                n0, n1 = 2 * d(1, 4), d()
                name = self.pick(["swiglu", "geglu_split", "glu", "reglu_inplace" if False else "reglu"], "glu-op")
                a = self.mk([n0 + (1 if self.odds(6) else 0), n1], f16)
                args = ([a, self.mk([n0, n1], f16)] if name.endswith("split") else [a] if name != "glu"
                        else [a, self.pick([0, 1, 2, 3, 4, 5, 6, -1], "glu-kind"), self.odds(2)])
            elif name == "rope_multi":
                hd, t = 4 * d(1, 3), d()
                mode = self.pick([8, 24, 0, 2, 40, 1], "mode")
                args = [self.mk([hd, d(), t], f16), self.idx(4 * t if mode & 8 else t, 50), None,
                        self.pick([hd, hd // 2, 2, hd + 2], "n_dims"),
                        self.pick([[1, 1, 0, 0], [0, 0, 0, 0], [hd // 4, hd // 4, 0, 0], [9, 9, 9, 9]], "sections"), mode]
            elif name == "conv1":
                K, IC, L = d(1, 3), d(1, 3), d(1, 8)
                name = self.pick(["conv_1d", "conv_transpose_1d", "conv_1d_dw"], "conv1-op")
                if name == "conv_1d":
                    args = [self.mk([K, IC, d()]), self.mk([L, IC, d(1, 2)])]
                elif name == "conv_transpose_1d":
                    args = [self.mk([K, d(), IC], f16), self.mk([L, IC])]
                else:
                    args = [self.mk([K, 1, IC]), self.mk([L, IC])]
                args += [self.dim(-1, 3), self.dim(-1, 2), self.dim(0, 2)]
            elif name == "conv_dw":
                C, k0, k1 = d(1, 3), d(1, 3), d(1, 3)
                name = self.pick(["conv_2d_dw", "conv_2d_dw_direct", "conv_2d_direct", "conv_transpose_2d_p0"], "dw-op")
                x = self.mk([d(1, 8), d(1, 8), C, d(1, 2)])
                if name == "conv_2d_direct":
                    args = [self.mk([k0, k1, C, d()], f16), x] + [self.dim(-1, 3) for _ in range(6)]
                elif name == "conv_transpose_2d_p0":
                    args = [self.mk([k0, k1, d(), C], g.GGML_TYPE_F16), x, self.dim(-1, 3)]
                else:
                    args = [self.mk([k0, k1, 1, C]), x] + [self.dim(-1, 3) for _ in range(6)]
            elif name == "mul_mat_id":
                K, M, ne, nu, nt = d(), d(), d(1, 3), d(1, 2), d(1, 3)
                args = [self.mk([K, M, ne], f16), self.mk([K, self.pick([1, nu], "nb1"), nt]), self.idx(nu, ne, [nu, nt])]
            elif name == "set":
                x = self.mk([d(2, 6), d(2, 6)])
                name = self.pick(["set_1d", "set_2d", "set", "set_1d_inplace"], "set-op")
                b = self.mk([d(1, 3), d(1, 2)])
                args = ([x, b, 4 * self.dim(0, 12)] if name.startswith("set_1d") else
                        [x, b, 4 * d(1, 6), 4 * self.dim(0, 12)] if name == "set_2d" else
                        [x, b, 4 * d(1, 6), 4 * d(4, 36), 4 * d(4, 36), 4 * self.dim(0, 12)])
            elif name == "window":
                C, W, H = d(1, 3), d(1, 6), d(1, 6)
                name = self.pick(["win_part", "roll", "pad_reflect_1d", "timestep_embedding"], "win-op")
                x = self.mk([C, W, H])
                args = ([x, self.dim(-1, 4)] if name == "win_part" else
                        [x] + [self.dim(-3, 3) for _ in range(4)] if name == "roll" else
                        [x, self.dim(-1, 3), self.dim(-1, 3)] if name == "pad_reflect_1d" else
                        [self.mk([d()]), self.dim(-1, 6), self.pick([10000, 0, -1], "period")])
            else:  # roll / add1 / diag
                name = self.pick(["add1", "diag", "diag_mask_zero", "add_inplace", "scale_inplace"], "small-op")
                x = self.mk([d(), d(), d(1, 2)])
                args = ([x, self.mk([1] if self.odds(2) else [d()])] if name == "add1" else
                        [self.mk([d(), self.pick([1, 1, 2], "n1")])] if name == "diag" else
                        [x, self.dim(-1, 3)] if name == "diag_mask_zero" else
                        [x, self.mk([d(), 1])] if name == "add_inplace" else [x, self.float_()])
            if self.odds(4):  # spoil one argument: a strided view, or any tensor at all
                i = self.draw(st.integers(0, len(args) - 1), "spoil")
                x = args[i]
                args[i] = (self.call(g.ggml_transpose, c0, x) if isinstance(x, g.Tensor) and self.odds(2)
                           else self.tensor())
            self.call(getattr(g, f"ggml_{name}"), c0, *args)

        def reshuffle(self):  # valid transposes and permutations: strided inputs for the next ops
            t = self.tensor()
            if isinstance(t, g.Tensor) and t.ctx.alive:
                if self.odds(2):
                    self.call(g.ggml_transpose, t.ctx, t)
                else:
                    self.call(g.ggml_permute, t.ctx, t, *self.draw(st.permutations(range(4)), "axes"))

        def data_io(self):
            t = self.tensor()
            n = t.nelements() if isinstance(t, g.Tensor) and t.ctx.alive else 3
            n = n if n <= 1 << 16 else 7  # huge no_alloc tensors: never build huge arrays here
            vals = self.pick([np.arange(n), np.zeros(n + 1), np.full(n, 0.5), np.array(["a"] * n),
                              np.zeros((n, 1, 1, 1, 1)), None], "values")
            fn = self.pick(["set_f32", "set_i32", "get_f32", "get_i32", "tensor_view", "nelements", "set_name"], "io")
            if fn in ("set_f32", "set_i32"):
                self.call(getattr(g, f"ggml_{fn}"), t, vals)
            elif fn == "set_name":
                self.call(g.ggml_set_name, t, "x" * self.pick([1, 63, 64, 300], "len"))
            else:
                self.call(getattr(g, f"ggml_{fn}"), t)

        def compute(self, t=None):
            t = self.tensor() if t is None else t
            if self.odds(3):
                gf = self.call(g.ggml_new_graph, self.ctx(), self.pick([1, 2, 3, 8, 2048, 0], "size"))
                gf = gf and self.call(g.ggml_build_forward_expand, gf, t)
            else:
                gf = self.call(g.ggml_build_forward_expand, t.ctx if isinstance(t, g.Tensor) else self.ctx(), t)
            if gf is None:
                return
            if self.odds(4):
                self.backend = self.backend or g.ggml_backend_cpu_init()
                self.call(g.ggml_backend_graph_compute, self.backend, gf)
            else:
                self.call(g.ggml_graph_compute, gf.ctx, gf, n_threads=self.pick([1, 2, 3, None, 0], "threads"))
            if isinstance(t, g.Tensor):
                self.call(g.ggml_get_f32, t)

        def backend_alloc(self):
            ctx = self.ctxs[2]  # the no_alloc context: only when small (malloc overcommits, compute would not)
            if ctx.alive and ctx.used_mem() < 64 * 1024 and all(
                    t.nbytes() < 1 << 20 for t in self.pool if t.ctx is ctx):
                self.backend = self.backend or g.ggml_backend_cpu_init()
                self.call(g.ggml_backend_alloc_ctx_tensors, ctx, self.backend)

        def graph_alloc(self):  # a graph over the no_alloc context, placed by ggml's graph allocator
            t = self.tensor()
            if not (isinstance(t, g.Tensor) and t.ctx is self.ctxs[2] and t.ctx.alive):
                return
            gf = self.call(g.ggml_build_forward_expand, t.ctx, t)
            if gf is None or sum(int(lib.ggml_nbytes(p)) for p in gf.nodes + gf.leafs) > 1 << 24:
                return  # malloc overcommits: a huge buffer would only fail once computed on
            self.backend = self.backend or g.ggml_backend_cpu_init()
            galloc = g.GraphAllocator(self.backend)
            self.gallocs.append(galloc)  # its buffer holds the tensors: freeing it early leaves them dangling
            self.call(galloc.alloc, gf)
            self.call(g.ggml_backend_graph_compute, self.backend, gf)

        def free(self):
            self.call(g.ggml_free, self.ctx())

        def run(self):
            state["example"] += 1
            print(f"=== example {state['example']}", flush=True)
            actions = ([self.new_tensor] * 4 + [self.from_numpy] + [self.op] * 8 + [self.recipe] * 4
                       + [self.reshuffle] * 2
                       + [self.data_io] * 2
                       + [self.compute] * 2 + [self.backend_alloc, self.graph_alloc, self.free])
            for _ in range(self.draw(st.integers(1, 30), "n_steps")):
                self.pick(actions, "action")()
            for t in list(self.pool):  # finally compute everything that was built
                if t.ctx.alive and t.op != 0:
                    self.compute(t)
            for c in self.ctxs:
                c.free()

    @hseed(seed)
    @settings(max_examples=n_examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def fuzz(data):
        Fuzz(data).run()

    fuzz()
    ok = sum(v for k, v in stats.items() if k.endswith(": ok"))
    print(f"stats: {ok} calls succeeded, {sum(stats.values()) - ok} raised")
    for k, v in sorted(stats.items()):
        print(f"  {v:6d}  {k}")
    print(MARKER, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else N_EXAMPLES, int(sys.argv[2]) if len(sys.argv) > 2 else SEED)
