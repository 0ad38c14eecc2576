#!/usr/bin/env bash
# The correctness oracle and benchmark peer: llama.cpp through the llama-cpp-python package from PyPI
# (it builds llama.cpp from source), with gguf-py (the format's reference implementation: its
# gguf.quants codecs), numpy and jinja2, in a virtualenv cached under ~/.cache/cinfer. Not needed by
# `make test`, which uses the reference outputs committed from it; tools that regenerate those
# outputs, and the side-by-side benchmarks, call this first.
#
#   hack/oracle.sh            build the virtualenv if missing, print its python's path
#   hack/oracle.sh --python   the same (for $(hack/oracle.sh) in scripts)
#
# The first build compiles llama.cpp (about 15-25 minutes on 2 cores; later calls are instant).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
GGUF_VERSION=0.19.0
cache="${CINFER_CACHE:-$HOME/.cache/cinfer}"
venv="$cache/oracle-venv"
stamp="$venv/.installed-$LLAMA_CPP_PYTHON_VERSION-$GGUF_VERSION"

mkdir -p "$cache"
# One build at a time: a second caller waits for the first instead of starting over.
exec 9>"$cache/oracle-venv.lock"
flock 9
if [[ ! -e "$stamp" ]]; then
  echo "oracle: building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION into $venv (once; slow)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  # GGML_NATIVE: the peer uses every instruction set this CPU has, as a user's local build would.
  CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" "gguf==$GGUF_VERSION" numpy jinja2 >&2
  touch "$stamp"
fi
echo "$venv/bin/python"
