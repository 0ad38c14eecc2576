#!/usr/bin/env bash
# Installs the Debian packages cinfer needs to build and test, and nothing else.
# Idempotent and quiet when everything is present; works as root or through sudo.
# Called by the Makefile whenever its pkg-config probe fails, so a fresh machine needs no manual step.
set -euo pipefail

packages=(
  build-essential pkg-config
  libcurl4-openssl-dev libjansson-dev libssl-dev check libyaml-dev zlib1g-dev
  clang clang-format libclang-rt-14-dev   # lint, fuzz targets (libFuzzer)
  openssl curl python3 python3-venv       # control plane certificates, tests
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
  echo "hack/deps.sh: missing packages (${missing[*]}) and not root without sudo" >&2
  exit 1
fi
echo "hack/deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
