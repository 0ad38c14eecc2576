#!/usr/bin/env bash
# Builds the helm CLI from the version pinned in hack/helm/go.mod into a cache
# directory outside the repository, keyed by a hash of go.mod, go.sum and this
# script:
#   ${CINFER_CACHE:-$HOME/.cache/cinfer}/helm/<hash>/bin/helm
# A warm call (the binary for the current hash exists) prints nothing and
# exits 0. Concurrent calls are serialised with flock; the bin dir appears
# atomically.
#
# Usage: hack/build-helm.sh [--print-bin-dir]
set -euo pipefail

usage() {
	echo "usage: $0 [--print-bin-dir]" >&2
	exit 2
}

print_bin_dir=0
case "${1:-}" in
'') ;;
--print-bin-dir) print_bin_dir=1 ;;
-h | --help) usage ;;
*) usage ;;
esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mod_dir="$here/helm"

# The key covers everything that decides what gets built. It is computed
# without Go so that a warm call needs nothing but sha256sum.
key="$(cat "$mod_dir/go.mod" "$mod_dir/go.sum" "$here/build-helm.sh" |
	sha256sum | cut -c1-16)"
cache_root="${CINFER_CACHE:-$HOME/.cache/cinfer}/helm"
key_dir="$cache_root/$key"
bin_dir="$key_dir/bin"

done_ok() {
	if ((print_bin_dir)); then
		echo "$bin_dir"
	fi
	exit 0
}

[[ -x "$bin_dir/helm" ]] && done_ok

go_bin="${GO:-}"
if [[ -z "$go_bin" ]]; then
	go_bin="$(command -v go || true)"
	[[ -n "$go_bin" ]] || { [[ -x /usr/local/go/bin/go ]] && go_bin=/usr/local/go/bin/go; }
fi
if [[ -z "$go_bin" || ! -x "$go_bin" ]]; then
	echo "build-helm: go not found (install Go >= 1.23, put it on PATH or set GO=/path/to/go)" >&2
	exit 1
fi
command -v flock >/dev/null || {
	echo "build-helm: flock not found (util-linux)" >&2
	exit 1
}

mkdir -p "$key_dir"
exec 9>"$key_dir/build.lock"
if ! flock -n 9; then
	echo "build-helm: another build of $key is running; waiting for it" >&2
	flock 9
fi
# Another process may have finished the build while we waited.
[[ -x "$bin_dir/helm" ]] && done_ok

tmp="$key_dir/bin.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"

cd "$mod_dir"
export GOFLAGS="${GOFLAGS:-} -mod=readonly"
helm_version="$("$go_bin" list -m -f '{{.Version}}' helm.sh/helm/v3)"
client_go="$("$go_bin" list -m -f '{{.Version}}' k8s.io/client-go)"
kube_minor="$(echo "$client_go" | cut -d. -f2)"
# Same stamping as helm's Makefile: `helm version` reports the pinned release
# and the default capabilities (.Capabilities.KubeVersion for `helm template`,
# the lint rules) follow the pinned client-go.
ldflags="-s -w"
ldflags+=" -X helm.sh/helm/v3/internal/version.version=$helm_version"
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
	ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kube_minor"
done

echo "build-helm: building helm $helm_version into $bin_dir (cold: a few minutes on 2 cores; a warm Go build cache: seconds)" >&2
start=$(date +%s)
CGO_ENABLED=0 "$go_bin" build -trimpath -ldflags="$ldflags" -o "$tmp/helm" helm.sh/helm/v3/cmd/helm
{
	"$go_bin" version
	echo "helm $helm_version"
	echo "client-go $client_go"
	echo "build_seconds $(($(date +%s) - start))"
} >"$tmp/BUILDINFO"

rm -rf "$bin_dir"
mv "$tmp" "$bin_dir"
echo "build-helm: done in $(($(date +%s) - start))s" >&2
done_ok
