#!/usr/bin/env bash
# `make run`: serve a model's OpenAI API on 127.0.0.1:$PORT (default 8000), logs as text.
#   hack/run-engine.sh BUILD/bin/cinfer-engine [extra serve flags...]
#   MODEL=path.gguf serves that model (any llama / qwen2 / qwen3 GGUF). Without MODEL, a small
#   RANDOM-WEIGHT model is generated once (offline, ~15 MB under BUILD/models/): the server works
#   end to end but its text is gibberish; point MODEL at a real GGUF for real output.
#   PORT=0 picks a free port (the "serving" log line names it); HOST overrides the address. Every
#   flag also reads CINFER_ENGINE_* from the environment (see `serve --help`).
set -euo pipefail
bin="${1:?usage: $0 path/to/cinfer-engine [serve flags...]}"
shift
model="${MODEL:-}"
if [ -z "$model" ]; then
	model="$(dirname "$(dirname "$bin")")/models/random-small-q8_0.gguf"
	if [ ! -f "$model" ]; then
		mkdir -p "$(dirname "$model")"
		echo "run-engine: no MODEL given; generating a small random-weight model at $model" >&2
		"$bin" gen-model --out "$model.tmp" --type q8_0 --dim 256 --layers 4 --heads 4 \
			--kv-heads 4 --ffn 768 --vocab-size 4096 --context-length 2048 --log-format text
		mv "$model.tmp" "$model"
	fi
	echo "run-engine: serving $model (random weights: set MODEL=path.gguf for a real model)" >&2
fi
exec "$bin" serve --model "$model" --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" \
	--log-format text "$@"
