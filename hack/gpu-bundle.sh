#!/usr/bin/env bash
# Builds what hack/gpu-check.sh runs on a GPU host into a self-contained folder: the CUDA engine,
# the CUDA op suite, the shared libraries `ldd` names for them (the GPU hosts have none of our
# Debian libraries; glibc and the NVIDIA driver's libcuda are the host's), and the check script.
# Needs no GPU; the toolkit comes from hack/cuda-toolkit.sh when none is installed.
#
#   hack/gpu-bundle.sh OUT_DIR     then copy OUT_DIR to the GPU host and run OUT_DIR/gpu-check.sh
#
# cuBLAS is not bundled (its library is 500 MB; the bundle must stay under 64 MiB): the backend
# loads libcublas.so.13 at run time when the host has it (a CUDA 13 toolkit does) and multiplies
# with its own kernels otherwise (slower prefill; the check says which it ran).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: hack/gpu-bundle.sh OUT_DIR}"
cuda_home="${CUDA_HOME:-$(./hack/cuda-toolkit.sh)}"
make -j"${JOBS:-2}" CUDA=1 CUDA_HOME="$cuda_home" build-cuda/bin/cinfer-engine \
	build-cuda/tests/engine/test_backend_cuda
mkdir -p "$out/bin" "$out/lib"
cp build-cuda/bin/cinfer-engine build-cuda/tests/engine/test_backend_cuda "$out/bin/"
cp hack/gpu-check.sh "$out/"
# every library ldd resolves, except the C library's own and the driver's (the host provides them)
for b in "$out"/bin/*; do
	ldd "$b" | awk '/=> \// { print $3 }'
done | sort -u | while read -r lib; do
	case "$(basename "$lib")" in
	libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*.so.* | \
		libcuda.so.* | libresolv.so.*) ;;
	*) cp -L "$lib" "$out/lib/" ;;
	esac
done
size=$(du -sm "$out" | cut -f1)
echo "gpu-bundle: $out ($size MiB): $(ls "$out/bin" | tr '\n' ' ')"
if [ "$size" -ge 64 ]; then
	echo "gpu-bundle: over the 64 MiB the GPU host accepts" >&2
	exit 1
fi
