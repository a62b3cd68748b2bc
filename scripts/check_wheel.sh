#!/usr/bin/env bash
# A built wheel on a machine like a user's: installed into a fresh virtual environment, then run with
# no C compiler and no cmake, HOME and XDG_CACHE_HOME empty folders (scripts/check_wheel.py: it imports
# from its own lib/, runs this CPU's best ggml CPU variant and ggmlpy's prebuilt kernels, trains with
# `python -m ggmlpy demo`, runs an ONNX model and compiled ag_* steps, and compiles nothing); then the
# same again with OpenBLAS and the Vulkan loader hidden too (ggml's BLAS and Vulkan modules skipped,
# gemm.c off, everything else runs).
#
# How the tools are hidden: a mount namespace (unshare -rm: no root needed) in which /dev/null is
# bound over the file each of cc, gcc, c++, g++, clang and cmake resolves to, and over OpenBLAS's
# and the Vulkan loader's libraries for the second run. The names stay on PATH but are no longer
# executable (or loadable), so `which cc` finds nothing and dlopen fails, as where they are not
# installed. (/bin/false bound over them would leave a compiler that runs and fails: a broken
# compiler, not a missing one; a PATH without them would not hide /usr/bin, which python and much
# else need.)
#
# Usage: bash scripts/check_wheel.sh dist/ggmlpy-*.whl [WORKDIR]   (WORKDIR: the venv and empty HOME)
set -euo pipefail
wheel=$(realpath "$1")
work=$(realpath -m "${2:-$(mktemp -d)}")
checks=$(realpath "$(dirname "$0")/check_wheel.py")
say() { echo "check_wheel: $*" >&2; }

rm -rf "$work/venv"
python3 -m venv "$work/venv"
say "installing $(basename "$wheel") into $work/venv"
"$work/venv/bin/python" -m pip install -q "$wheel"

tools=()
for tool in cc gcc c++ g++ clang clang++ cmake; do
  p=$(command -v "$tool" || true)
  [[ -n $p ]] && tools+=("$(readlink -f "$p")")
done
# The run-time libraries the wheel's optional modules need (ggml's BLAS module and gemm.c, the Vulkan module)
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libopenblas.so.0 2>/dev/null || true)
vulkan=$(readlink -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 2>/dev/null || true)
absent=()
[[ -z $blas ]] && absent+=(--no-blas)
[[ -z $vulkan ]] && absent+=(--no-vulkan)

hidden_run() {  # hidden_run FILE... -- ARGS: the checks with FILEs hidden, an empty HOME, no cache
  rm -rf "$work/home"
  mkdir -p "$work/home"
  (cd "$work" && unshare -rm bash -c '
      while [[ $1 != -- ]]; do mount --bind /dev/null "$1"; shift; done; shift
      exec env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME_DIR" XDG_CACHE_HOME="$HOME_DIR/.cache" "$@"' \
    _ "$@")
}
export HOME_DIR="$work/home"
say "compilers and cmake hidden (${tools[*]})"
hidden_run "${tools[@]}" -- "$work/venv/bin/python" "$checks" "${absent[@]}"
optional=($blas $vulkan)
if ((${#optional[@]})); then
  say "compilers, cmake, OpenBLAS and the Vulkan loader (${optional[*]}) hidden"
  hidden_run "${tools[@]}" "${optional[@]}" -- "$work/venv/bin/python" "$checks" --no-blas --no-vulkan
else
  say "neither OpenBLAS nor a Vulkan loader on this machine: the first run already ran without them"
fi
say "all checks passed"
