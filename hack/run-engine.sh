#!/usr/bin/env bash
# `make run`: serve the engine's HTTP API on 127.0.0.1:$PORT (default 8000), logs as text.
#   hack/run-engine.sh BUILD/bin/cinfer-engine [extra serve flags...]
#   PORT=0 picks a free port (the "http server listening" log line names it); HOST overrides the
#   address. Every flag also reads CINFER_ENGINE_* from the environment (see `serve --help`).
set -euo pipefail
bin="${1:?usage: $0 path/to/cinfer-engine [serve flags...]}"
shift
exec "$bin" serve --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" --log-format text "$@"
