"""The checks scripts/check_wheel.sh runs with an installed wheel, on a machine made to look like a
user's (no C compiler, no cmake, an empty HOME and cache; with --no-blas, no OpenBLAS either; with
--no-vulkan, no Vulkan loader). Each check prints one line; the first that does not hold exits 1.

    python scripts/check_wheel.py [--no-blas] [--no-vulkan]   (from the wheel's venv, outside the source tree)
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def check(ok: bool, what: str) -> None:
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        sys.exit(1)


def cpu_flags() -> set:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def onnx_model(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A Gemm, Relu and Softmax model written with onnx's helpers; its weights and an input."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Softmax", ["r"], ["y"], axis=1)],
        "check", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return w, b, rng.standard_normal((3, 8)).astype(np.float32)


def main() -> None:
    no_blas, no_vulkan = "--no-blas" in sys.argv, "--no-vulkan" in sys.argv
    for tool in ("cc", "gcc", "c++", "g++", "clang", "cmake"):
        check(shutil.which(tool) is None, f"no {tool} on PATH")
    cache = Path(os.environ["XDG_CACHE_HOME"])
    check(not cache.exists() or not any(cache.iterdir()), f"XDG_CACHE_HOME ({cache}) is empty")

    import ggmlpy as g
    from ggmlpy import kernels
    from ggmlpy.core.backend_modules import cpu_variant
    check(Path(g.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()),
          f"ggmlpy is the installed one ({g.__file__})")
    check(g.found.source == "package", f"libggml from the package's lib/ ({g.found.lib_dir})")
    data = g.info()
    v = cpu_variant()
    check(v is not None and v.scores[v.name] == max(v.scores.values()),
          f"ggml's CPU variant is this CPU's best: {v and v.name} ({v and v.chosen})")
    if "avx512f" in cpu_flags():
        check(g.ggml_cpu_has_avx512(), "this CPU has AVX-512 and the variant uses it")
    levels = kernels.supported_isa_levels()
    K = kernels.get()
    check(K is not None and kernels.isa_level() == levels[-1] and "lib/kernels" in str(K.path),
          f"ggmlpy's kernels for {levels[-1]}, prebuilt: {K and K.path}")
    if no_blas:
        check("blas" in data["skipped_modules"] and "BLAS" not in data["backends"],
              f"without OpenBLAS ggml's BLAS module is skipped ({data['skipped_modules'].get('blas')})")
        check(K.gemm is None, "without OpenBLAS gemm.c is off: products stay ggml's")
    else:
        check(K.gemm is not None, "gemm.c over OpenBLAS")
    if (g.found.lib_dir / "libggml-vulkan.so").exists():  # a wheel built with the Vulkan toolchain
        if no_vulkan:
            check("vulkan" in data["skipped_modules"] and "Vulkan" not in data["backends"],
                  f"without a Vulkan loader the Vulkan module is skipped ({data['skipped_modules'].get('vulkan')})")
        else:
            check("Vulkan" in data["backends"], "the Vulkan module is loaded")

    r = subprocess.run([sys.executable, "-m", "ggmlpy", "demo"], capture_output=True, text=True, timeout=900)
    check(r.returncode == 0, "python -m ggmlpy demo trains" + ("" if r.returncode == 0 else ":\n" + r.stderr[-3000:]))

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "check.onnx"
        w, b, x = onnx_model(path)
        model = g.onnx_load(str(path), device="cpu")
        got = g.onnx_run(model, {"x": x})["y"]
        z = np.maximum(x @ w + b, 0)
        want = np.exp(z - z.max(1, keepdims=True))
        want /= want.sum(1, keepdims=True)
        check(np.allclose(got, want, rtol=1e-5, atol=1e-6), "an ONNX model (Gemm, Relu, Softmax) matches numpy")

    rng = np.random.default_rng(0)
    x_all = rng.standard_normal((16, 600)).astype(np.float32)
    y_all = (rng.standard_normal((4, 16)) @ x_all).argmax(axis=0)
    onehot = np.eye(4, dtype=np.float32)[y_all].T  # integer labels are checked on the host: no compiled step
    g.manual_seed(0)
    model = g.ag_sequential(g.ag_linear(16, 32, "relu"), g.ag_linear(32, 4))
    opt = g.optimizer_adam(model.parameters(), lr=1e-2)
    history = g.ag_fit(model, g.ag_softmax_cross_entropy_loss, opt,
                       g.ag_dataloader(x_all[:, :500], onehot[:, :500], batch_size=50, shuffle=True), epochs=5,
                       progress=False, compile=True)  # each step one ggml graph (ag_compile)
    model.eval()
    acc = g.ag_accuracy(model, x_all[:, 500:], y_all[500:])
    losses = history["loss"]
    check(acc > 0.7 and losses[-1] < losses[0],
          f"compiled ag_* training steps learn (held-out accuracy {acc:.2f})")
    check(not (cache / "ggmlpy" / "kernels").exists(), "nothing was compiled at run time")


if __name__ == "__main__":
    main()
