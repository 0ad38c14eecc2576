#!/usr/bin/env bash
# `make run`: serve the engine on 127.0.0.1:8000.
set -euo pipefail
bin="$1"
exec "$bin" serve --host 127.0.0.1 --port "${PORT:-8000}" --log-format text
