#!/usr/bin/env bash
# Builds one cinfer program for a container image and stages what the image's runtime stage copies:
# the stripped binary and the list of Debian packages it needs at run time. The Dockerfile's build
# stages run exactly this script, so a CI job without a container engine can run the same steps
# (tests/e2e/images.sh does). It does not install anything and does not build images.
#
#   hack/build-image-rootfs.sh [--no-make] PROGRAM DESTDIR
#       PROGRAM is engine, operator, autoscaler or router. Runs make for build/bin/cinfer-PROGRAM (skipped with
#       --no-make: stage what $BUILD already holds), then writes into DESTDIR (absent or empty):
#         usr/local/bin/cinfer-PROGRAM          stripped
#         usr/share/cinfer/runtime-packages     one Debian package per line, for apt-get install
#   hack/build-image-rootfs.sh --packages PROGRAM
#       prints the committed runtime package list (below) for PROGRAM
#   hack/build-image-rootfs.sh --derive BINARY
#       prints the packages that own BINARY's DT_NEEDED libraries (ldd + dpkg -S)
#
# Environment: BUILD (make build directory, default build), JOBS (make -j, default: CPUs),
# CUDA=1 (make CUDA=1, engine only), CINFER_VERSION (version compiled into cinfer-engine; checked).
set -euo pipefail
cd "$(dirname "$0")/.."

# The runtime package lists: the ONE place they live. Each must equal what --derive finds for the
# binary built on Debian 12 (checked on every staging and by tests/e2e/images.sh), so a new library
# dependency fails the image build here instead of at container start.
declare -A runtime_libs=(
	[engine]="libc6 libcurl4 libjansson4 libssl3"
	[operator]="libc6 libcurl4 libjansson4 libyaml-0-2"
	[autoscaler]="libc6 libcurl4 libjansson4 libyaml-0-2 zlib1g"
	[router]="libc6 libcurl4 libjansson4 libssl3 libyaml-0-2"
)
# Packages needed at run time that no ldd can see. engine: `fetch-model` downloads https:// and hf://
# models with libcurl, which verifies servers against /etc/ssl/certs. The operator, autoscaler and
# router talk to the API server with the ServiceAccount's ca.crt and scrape engines over plain http.
declare -A runtime_extra=(
	[engine]="ca-certificates"
	[operator]=""
	[autoscaler]=""
	[router]=""
)

die() {
	echo "build-image-rootfs: $*" >&2
	exit 1
}

usage() { # usage STATUS: the header's usage lines; on stderr unless asked for
	if [[ "$1" == 0 ]]; then
		sed -n '7,18p' "$0" | sed 's/^# \{0,1\}//'
	else
		sed -n '7,18p' "$0" | sed 's/^# \{0,1\}//' >&2
	fi
	exit "$1"
}

valid_program() {
	[[ -n "${runtime_libs[$1]+set}" ]] || die "unknown program '$1' (engine, operator, autoscaler, router)"
}

# pkg_of_file PATH: the Debian package that owns a file. ldd prints /lib/... paths, while packages may
# register the /usr/lib/... spelling (merged /usr), so both spellings and the link target are tried.
pkg_of_file() {
	local f="$1" real cand out
	real="$(readlink -f "$f")"
	for cand in "$f" "/usr$f" "${f#/usr}" "$real" "/usr$real" "${real#/usr}"; do
		out="$(dpkg -S "$cand" 2>/dev/null | grep -v '^diversion' | head -n1)" || true
		[[ -n "$out" ]] || continue
		out="${out%%: /*}" # "libcurl4:amd64: /usr/lib/..." -> "libcurl4:amd64"
		out="${out%%,*}"   # a file owned by several packages: the first
		echo "${out%%:*}"
		return 0
	done
	return 1
}

# derive BINARY [NAME]: one package per line (sorted) that owns a DT_NEEDED library of BINARY. Libraries
# of the NVIDIA CUDA toolkit (/usr/local/cuda*) and the driver's libcuda.so.1 (injected into the
# container by the NVIDIA container toolkit) come with the nvidia/cuda runtime base, not from apt.
derive() {
	local bin="$1" name="${2:-$1}" needed lib path pkg ldd_out
	[[ -f "$bin" ]] || die "$name: no such file"
	needed="$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')" ||
		die "$name: readelf failed"
	[[ -n "$needed" ]] || die "$name: no DT_NEEDED entries (static or not an ELF executable?)"
	ldd_out="$(ldd "$bin")" || die "$name: ldd failed"
	for lib in $needed; do
		case "$lib" in
		libasan.* | libubsan.* | libtsan.* | liblsan.*)
			die "$name links $lib: a sanitizer build; images need a release build (BUILD=build)"
			;;
		esac
		path="$(awk -v l="$lib" '$1 == l && $2 == "=>" { print $3; exit }' <<<"$ldd_out")"
		if [[ -z "$path" || "$path" == not ]]; then
			[[ "$lib" == libcuda.so.1 ]] && continue
			die "$name: $lib not found by ldd"
		fi
		case "$(readlink -f "$path")" in /usr/local/cuda*) continue ;; esac
		pkg="$(pkg_of_file "$path")" || die "$name: no Debian package owns $path ($lib)"
		echo "$pkg"
	done | sort -u
}

# The committed list for PROGRAM, one per line (sorted), libraries then extras.
packages() {
	# shellcheck disable=SC2086 # the lists are space-separated words
	printf '%s\n' ${runtime_libs[$1]} | sort -u
	# shellcheck disable=SC2086
	[[ -z "${runtime_extra[$1]}" ]] || printf '%s\n' ${runtime_extra[$1]} | sort -u
}

is_debian12() {
	[[ -r /etc/os-release ]] && (
		# shellcheck disable=SC1091
		. /etc/os-release
		[[ "${ID:-}" == debian && "${VERSION_ID:-}" == 12 ]]
	)
}

stage() {
	local prog="$1" dest="$2" do_make="$3"
	local build="${BUILD:-build}" jobs="${JOBS:-$(nproc)}" bin derived committed list
	local make_args=()
	valid_program "$prog"
	[[ -n "$dest" && "$dest" != / ]] || die "DESTDIR must be a directory other than /"
	if [[ -e "$dest" ]] && [[ -n "$(ls -A "$dest")" ]]; then
		die "$dest is not empty (stage into a fresh directory so nothing stale ships)"
	fi
	if [[ "${CUDA:-0}" == 1 ]]; then
		[[ "$prog" == engine ]] || die "CUDA=1 applies to the engine only"
		make_args+=(CUDA=1)
	fi
	if [[ -n "${CINFER_VERSION:-}" ]]; then
		[[ "$CINFER_VERSION" =~ ^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$ ]] ||
			die "CINFER_VERSION '$CINFER_VERSION': letters, digits and . + _ - only"
		# Makefile's per-file flags hook: CFLAGS_<path with _> applies to that object only.
		make_args+=("CFLAGS_engine_main=-DCINFER_VERSION='\"$CINFER_VERSION\"'")
	fi
	bin="$build/bin/cinfer-$prog"
	if [[ "$do_make" == 1 ]]; then
		# Not a sub-make of whatever called us: a jobserver we cannot reach would only warn.
		env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -j"$jobs" BUILD="$build" \
			OPT=-O2 "${make_args[@]}" "$bin" >&2 || die "make $bin failed"
	fi
	[[ -x "$bin" ]] || die "$bin not built (run make, or drop --no-make)"

	# Work on one copy: a make running elsewhere in the same tree may relink $bin meanwhile.
	mkdir -p "$dest/usr/local/bin" "$dest/usr/share/cinfer"
	full="$dest/.cinfer-$prog.unstripped" # global: the EXIT trap removes it
	cp "$bin" "$full"
	trap 'rm -f "$full"' EXIT
	derived="$(derive "$full" "$bin")"
	if is_debian12 && [[ "${CUDA:-0}" != 1 ]]; then
		# shellcheck disable=SC2086
		committed="$(printf '%s\n' ${runtime_libs[$prog]} | sort -u)"
		if [[ "$derived" != "$committed" ]]; then
			die "$bin needs packages that differ from runtime_libs[$prog] in $0;" \
				"update the list: $(diff <(echo "$committed") <(echo "$derived") | grep '^[<>]' | tr '\n' ' ')"
		fi
		list="$(packages "$prog")"
	else
		# Another distribution (the nvidia/cuda bases are Ubuntu): package names differ, so the list
		# is the derived one plus the extras; the committed one describes Debian 12 only.
		echo "build-image-rootfs: not Debian 12 or CUDA=1: using the derived package list" >&2
		# shellcheck disable=SC2086
		list="$( (
			echo "$derived"
			[[ -z "${runtime_extra[$prog]}" ]] || printf '%s\n' ${runtime_extra[$prog]}
		) | sort -u)"
	fi

	strip --strip-unneeded -o "$dest/usr/local/bin/cinfer-$prog" "$full"
	chmod 0755 "$dest/usr/local/bin/cinfer-$prog"
	echo "$list" >"$dest/usr/share/cinfer/runtime-packages"

	"$dest/usr/local/bin/cinfer-$prog" --help >/dev/null || die "staged cinfer-$prog --help failed"
	if [[ -n "${CINFER_VERSION:-}" && "$prog" == engine ]]; then
		local got
		got="$("$dest/usr/local/bin/cinfer-engine" version)"
		[[ "$got" == "cinfer-engine $CINFER_VERSION" ]] ||
			die "staged engine reports '$got', not $CINFER_VERSION (stale $build/obj/engine/main.o?)"
	fi
	echo "build-image-rootfs: staged cinfer-$prog ($(stat -c %s "$dest/usr/local/bin/cinfer-$prog") bytes)" \
		"into $dest; runtime packages: $(echo "$list" | tr '\n' ' ')" >&2
}

do_make=1
case "${1:-}" in
--packages)
	[[ $# -eq 2 ]] || usage 2
	valid_program "$2"
	packages "$2"
	;;
--derive)
	[[ $# -eq 2 ]] || usage 2
	derive "$2"
	;;
-h | --help) usage 0 ;;
*)
	if [[ "${1:-}" == --no-make ]]; then
		do_make=0
		shift
	fi
	[[ $# -eq 2 ]] || usage 2
	stage "$1" "$2" "$do_make"
	;;
esac
