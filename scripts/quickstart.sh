#!/usr/bin/env bash
# Quick start, command 1: make a virtual environment (.venv/, unless one is active), `pip install`
# ggmlpy into it as any package is installed (pip builds the wheel: pyproject.toml's CMake build
# puts the pinned libggml with one CPU module per x86 level, rpc-server, BLAS on OpenBLAS, Vulkan
# when its toolchain is installed, and ggmlpy's kernels per x86-64 level into the package), and
# run the main job. Command 2 is then `.venv/bin/python -m pytest -q tests`, which tests that
# installed package (the checkout's source is under src/, so it is not imported by accident).
#
# Why a venv of our own: stock Debian 12 has no `python` command, and its system pip refuses to
# install (PEP 668, externally-managed-environment). When a venv is already active, ggmlpy goes
# into that one and .venv is made a link to it, so command 2 stays the same.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "quickstart: $*" >&2; }
as_root_apt() { [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; }
apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# The compiler and cmake that the wheel's CMake build needs, and OpenBLAS, which ggml's BLAS backend uses
# for the CPU device's transposed matrix products (as root on Debian; otherwise say what to install).
missing=()
for tool in cmake c++; do command -v "$tool" >/dev/null || missing+=("$tool"); done
blas=$(ls /usr/include/*/openblas*/cblas.h /usr/include/openblas/cblas.h 2>/dev/null | head -1 || true)
if ((${#missing[@]})) || [[ -z $blas ]]; then
  if as_root_apt; then
    apt_install cmake build-essential ninja-build libopenblas-openmp-dev
  elif ((${#missing[@]})); then
    say "missing ${missing[*]}: sudo apt-get install cmake build-essential ninja-build"
    exit 2
  else
    say "no OpenBLAS, building without ggml's BLAS backend" \
      "(sudo apt-get install libopenblas-openmp-dev for faster matrix products)"
  fi
fi

# The virtual environment.
if [[ -n ${VIRTUAL_ENV:-} && $(realpath -m .venv) != $(realpath -m "$VIRTUAL_ENV") ]]; then
  if [[ -e .venv && ! -L .venv ]]; then
    say "a venv is active ($VIRTUAL_ENV) but .venv/ is another one: deactivate, or remove .venv/"
    exit 2
  fi
  ln -sfn "$VIRTUAL_ENV" .venv
  say "using the active virtual environment $VIRTUAL_ENV (.venv links to it)"
elif [[ ! -x .venv/bin/python ]]; then
  py=$(command -v python3 || command -v python || true)
  if [[ -z $py ]]; then
    if as_root_apt; then apt_install python3 python3-venv; py=$(command -v python3);
    else say "no python3: sudo apt-get install python3 python3-venv"; exit 2; fi
  fi
  say "creating the virtual environment .venv/ with $py"
  if ! "$py" -m venv .venv 2>/dev/null; then
    # Debian splits venv's pip bootstrap off into python3-venv.
    rm -rf .venv
    if as_root_apt; then apt_install python3-venv; "$py" -m venv .venv;
    else say "$py -m venv failed: sudo apt-get install python3-venv, then rerun"; exit 2; fi
  fi
fi
PY=.venv/bin/python

say "pip install \".[test,demo]\": building the wheel (about 6.5 minutes on 2 cores with Vulkan, from a fresh clone; about a minute again in this checkout)"
"$PY" -m pip install -q ".[test,demo]"
"$PY" -m ggmlpy info
"$PY" -m ggmlpy demo
