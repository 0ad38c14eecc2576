#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver, kube-controller-manager, etcd)
# from the versions pinned in hack/control-plane/go.mod into a cache directory
# outside the repository, keyed by a hash of go.mod, go.sum and this script:
#   ${CINFER_CACHE:-$HOME/.cache/cinfer}/control-plane/<hash>/bin/
# A warm call (binaries for the current hash exist) prints nothing and exits 0.
# Concurrent calls are serialised with flock; the bin dir appears atomically.
#
# Usage: hack/build-control-plane.sh [--print-bin-dir]
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
mod_dir="$here/control-plane"
binaries=(kube-apiserver kube-controller-manager etcd)

# The key covers everything that decides what gets built. It is computed
# without Go so that a warm call needs nothing but sha256sum.
key="$(cat "$mod_dir/go.mod" "$mod_dir/go.sum" "$here/build-control-plane.sh" |
	sha256sum | cut -c1-16)"
cache_root="${CINFER_CACHE:-$HOME/.cache/cinfer}/control-plane"
key_dir="$cache_root/$key"
bin_dir="$key_dir/bin"

have_all() {
	local b
	for b in "${binaries[@]}"; do
		[[ -x "$bin_dir/$b" ]] || return 1
	done
}

done_ok() {
	if ((print_bin_dir)); then
		echo "$bin_dir"
	fi
	exit 0
}

have_all && done_ok

go_bin="${GO:-}"
if [[ -z "$go_bin" ]]; then
	go_bin="$(command -v go || true)"
	[[ -n "$go_bin" ]] || { [[ -x /usr/local/go/bin/go ]] && go_bin=/usr/local/go/bin/go; }
fi
if [[ -z "$go_bin" || ! -x "$go_bin" ]]; then
	echo "build-control-plane: go not found (install Go >= 1.23, put it on PATH or set GO=/path/to/go)" >&2
	exit 1
fi
command -v flock >/dev/null || {
	echo "build-control-plane: flock not found (util-linux)" >&2
	exit 1
}

mkdir -p "$key_dir"
exec 9>"$key_dir/build.lock"
if ! flock -n 9; then
	echo "build-control-plane: another build of $key is running; waiting for it" >&2
	flock 9
fi
# Another process may have finished the build while we waited.
have_all && done_ok

tmp="$key_dir/bin.tmp.$$"
rm -rf "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"

cd "$mod_dir"
export GOFLAGS="${GOFLAGS:-} -mod=readonly"
kube_version="$("$go_bin" list -m -f '{{.Version}}' k8s.io/kubernetes)"
kube_minor="$(echo "$kube_version" | cut -d. -f2)"
# Same version stamping as kubernetes' hack/lib/version.sh, so /version and
# `kubectl version` report the pinned release instead of v0.0.0-master.
build_date="1970-01-01T00:00:00Z"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
	ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

echo "build-control-plane: building kubernetes $kube_version and etcd into $bin_dir (cold: about 5 min on 2 cores; a warm Go build cache: under a minute)" >&2
start=$(date +%s)
"$go_bin" build -trimpath -ldflags="$ldflags" -o "$tmp/" \
	k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
"$go_bin" build -trimpath -ldflags="-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
{
	"$go_bin" version
	echo "kubernetes $kube_version"
	echo "etcd $("$go_bin" list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
	echo "build_seconds $(($(date +%s) - start))"
} >"$tmp/BUILDINFO"

rm -rf "$bin_dir"
mv "$tmp" "$bin_dir"
echo "build-control-plane: done in $(($(date +%s) - start))s" >&2
done_ok
