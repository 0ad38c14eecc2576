#!/usr/bin/env bash
# A CUDA toolkit for `make CUDA=1` on machines that have none: NVIDIA's CUDA 13.0 Update 2 wheels
# from PyPI (nvcc, the runtime, the C runtime headers, NVVM, CCCL and cuBLAS's headers), unpacked
# into a cached folder under ~/.cache/cinfer. Compiling and linking needs no GPU and no driver.
#
#   hack/cuda-toolkit.sh          install if missing; print the toolkit's root (CUDA_HOME)
#
# Why 13.0: the GPU hosts run the CUDA 13.0 driver (580.xx). A program built with a newer runtime
# would lean on minor-version compatibility, under which any API the 13.0 driver lacks fails at run
# time and PTX from a newer nvcc cannot be JIT-compiled by it; 13.0's runtime and compiler match the
# driver exactly. cudart is linked statically and cuBLAS is loaded at run time (cuda_blas.c), so
# only cuBLAS's headers are kept: its 420 MB wheel is downloaded once and reduced to 1 MB.
# Cost, measured on the development machine: about 530 MB downloaded once (about 10 s from the
# registry there), 250 MB kept on disk, 30 s to unpack. Later calls print the path at once.
set -euo pipefail

CUDA_VERSION=13.0.2
declare -A wheels=(
	[nvidia-cuda-nvcc]=13.0.88
	[nvidia-cuda-runtime]=13.0.96
	[nvidia-cuda-crt]=13.0.88
	[nvidia-nvvm]=13.0.88
	[nvidia-cuda-cccl]=13.0.85
	[nvidia-cublas]=13.0.2.14
)
cache="${CINFER_CACHE:-$HOME/.cache/cinfer}"
root="$cache/cuda-$CUDA_VERSION"
stamp="$root/.installed"

mkdir -p "$cache"
# One install at a time: a second caller (another make, another worktree) waits for the first.
exec 9>"$cache/cuda-$CUDA_VERSION.lock"
flock 9
if [[ ! -e "$stamp" ]]; then
	echo "cuda-toolkit: installing CUDA $CUDA_VERSION from PyPI wheels into $root (once)" >&2
	tmp="$(mktemp -d "$cache/cuda-dl.XXXXXX")"
	trap 'rm -rf "$tmp"' EXIT
	specs=()
	for w in "${!wheels[@]}"; do specs+=("$w==${wheels[$w]}"); done
	python3 -m pip download --quiet --disable-pip-version-check --no-cache-dir --no-deps \
		--only-binary=:all: --python-version 3.12 --implementation py \
		--platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
		--platform manylinux2010_x86_64 -d "$tmp/wheels" "${specs[@]}" >&2
	mkdir -p "$tmp/x"
	for f in "$tmp"/wheels/*.whl; do
		case "$(basename "$f")" in
		nvidia_cublas-*) unzip -q -o "$f" 'nvidia/cu13/include/*' -d "$tmp/x" ;;
		*) unzip -q -o "$f" 'nvidia/*' -d "$tmp/x" ;;
		esac
	done
	rm -rf "$root"
	mv "$tmp/x/nvidia/cu13" "$root"
	# nvcc.profile looks for libraries in lib64 (and lib64/stubs): the wheels ship lib/.
	ln -sfn lib "$root/lib64"
	"$root/bin/nvcc" --version | grep -q "release ${CUDA_VERSION%.*}" ||
		{
			echo "cuda-toolkit: $root/bin/nvcc is not CUDA ${CUDA_VERSION%.*}" >&2
			exit 1
		}
	touch "$stamp"
	echo "cuda-toolkit: installed ($(du -sh "$root" | cut -f1))" >&2
fi
echo "$root"
