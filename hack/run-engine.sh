#!/usr/bin/env bash
# `make run`: serve a model's OpenAI API on 127.0.0.1:$PORT (default 8000), logs as text.
#   hack/run-engine.sh BUILD/bin/cinfer-engine [extra serve flags...]
#   MODEL=path.gguf serves that model (any GGUF of the architectures the README lists). Without
#   MODEL it serves models/stories260K/stories260K-Q8_0.gguf, shipped in the repository (a 260K
#   llama that tells children's stories in English; MIT, see its SOURCE.md), so the first curl
#   answers in English.
#   PORT=0 picks a free port (the "serving" log line names it); HOST overrides the address. Every
#   flag also reads CINFER_ENGINE_* from the environment (see `serve --help`).
set -euo pipefail
bin="${1:?usage: $0 path/to/cinfer-engine [serve flags...]}"
shift
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="${MODEL:-}"
if [ -z "$model" ]; then
	model="$root/models/stories260K/stories260K-Q8_0.gguf"
	echo "run-engine: no MODEL given; serving the shipped stories260K model (MODEL=path.gguf for" \
		"another)" >&2
fi
exec "$bin" serve --model "$model" --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" \
	--log-format text "$@"
