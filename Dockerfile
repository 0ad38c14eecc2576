# cinfer container images: one multi-stage file, one target per program.
#
#   docker build --target engine      -t ghcr.io/cinfer/cinfer-engine:0.1.0 .
#   docker build --target engine-cuda -t ghcr.io/cinfer/cinfer-engine:0.1.0-cuda .  # once the CUDA backend lands
#   docker build --target operator    -t ghcr.io/cinfer/cinfer-operator:0.1.0 .
#   docker build --target autoscaler  -t ghcr.io/cinfer/cinfer-autoscaler:0.1.0 .
#   docker build --target router      -t ghcr.io/cinfer/cinfer-router:0.1.0 .
#
# Build stages install the build dependencies with hack/deps.sh and run hack/build-image-rootfs.sh,
# which builds with make and stages the stripped binary plus the runtime package list it verified
# (ldd + dpkg -S). Runtime stages install only those packages, run as 65532:65532 and hold no model:
# models come from a volume or the operator's fetch-model init container, mounted at /models.
# tests/e2e/images.sh runs the build stages' commands and checks this file without a container engine.
# The CPU engine is the last stage, so a plain `docker build .` (BuildKit, buildah: only the stages a
# target needs are built) produces it.

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG SOURCE=https://github.com/cinfer/cinfer

# ---- build: the four CPU programs ------------------------------------------------------------------
FROM debian:12 AS build
ARG VERSION
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY hack/deps.sh hack/deps.sh
RUN hack/deps.sh && rm -rf /var/lib/apt/lists/*
COPY Makefile ./
COPY hack hack
COPY common common
COPY engine engine
COPY operator operator
COPY autoscaler autoscaler
COPY router router
RUN CINFER_VERSION="$VERSION" hack/build-image-rootfs.sh engine /out/engine \
 && hack/build-image-rootfs.sh operator /out/operator \
 && hack/build-image-rootfs.sh autoscaler /out/autoscaler \
 && hack/build-image-rootfs.sh router /out/router

# ---- operator --------------------------------------------------------------------------------------
FROM debian:12-slim AS operator
ARG VERSION
ARG REVISION
ARG SOURCE
LABEL org.opencontainers.image.title="cinfer-operator" \
      org.opencontainers.image.description="cinfer operator: InferenceService to engine Deployment and Service (probes and metrics on :8081)" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.source="$SOURCE" \
      org.opencontainers.image.base.name="docker.io/library/debian:12-slim"
COPY --from=build /out/operator/usr/share/cinfer/runtime-packages /usr/share/cinfer/runtime-packages
RUN apt-get update \
 && xargs -a /usr/share/cinfer/runtime-packages apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nonroot
COPY --from=build /out/operator/usr/local/bin/cinfer-operator /usr/local/bin/cinfer-operator
ENV CINFER_OPERATOR_PROBE_ADDR=0.0.0.0:8081
USER 65532:65532
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/cinfer-operator"]

# ---- autoscaler ------------------------------------------------------------------------------------
FROM debian:12-slim AS autoscaler
ARG VERSION
ARG REVISION
ARG SOURCE
LABEL org.opencontainers.image.title="cinfer-autoscaler" \
      org.opencontainers.image.description="cinfer autoscaler: InferenceService replicas from engine metrics (probes and metrics on :8081)" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.source="$SOURCE" \
      org.opencontainers.image.base.name="docker.io/library/debian:12-slim"
COPY --from=build /out/autoscaler/usr/share/cinfer/runtime-packages /usr/share/cinfer/runtime-packages
RUN apt-get update \
 && xargs -a /usr/share/cinfer/runtime-packages apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nonroot
COPY --from=build /out/autoscaler/usr/local/bin/cinfer-autoscaler /usr/local/bin/cinfer-autoscaler
ENV CINFER_AUTOSCALER_PROBE_ADDR=0.0.0.0:8081
USER 65532:65532
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/cinfer-autoscaler"]

# ---- router ----------------------------------------------------------------------------------------
FROM debian:12-slim AS router
ARG VERSION
ARG REVISION
ARG SOURCE
LABEL org.opencontainers.image.title="cinfer-router" \
      org.opencontainers.image.description="cinfer router: one OpenAI endpoint for every model, routed by cached prefix and load (API on :8080, probes and metrics on :8081)" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.source="$SOURCE" \
      org.opencontainers.image.base.name="docker.io/library/debian:12-slim"
COPY --from=build /out/router/usr/share/cinfer/runtime-packages /usr/share/cinfer/runtime-packages
RUN apt-get update \
 && xargs -a /usr/share/cinfer/runtime-packages apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nonroot
COPY --from=build /out/router/usr/local/bin/cinfer-router /usr/local/bin/cinfer-router
ENV CINFER_ROUTER_HOST=0.0.0.0
ENV CINFER_ROUTER_PROBE_ADDR=0.0.0.0:8081
USER 65532:65532
EXPOSE 8080
EXPOSE 8081
ENTRYPOINT ["/usr/local/bin/cinfer-router"]

# ---- engine with the CUDA backend ------------------------------------------------------------------
# NOT VERIFIED YET: `make CUDA=1` builds now, but this target has not been built in a container, and
# the backend targets CUDA 13.0 (it loads libcublas.so.13): on these 12.6 bases it would run its own
# GEMM kernels instead of cuBLAS. Move both bases to CUDA 13.0 when verified (issue #18). The devel
# and runtime bases must carry the same CUDA version and OS. They are Ubuntu, so the runtime package
# list is the one derived from the binary (the committed lists name Debian 12 packages); CUDA
# libraries come with the runtime base.
FROM nvidia/cuda:12.6.3-devel-ubuntu24.04 AS build-cuda
ARG VERSION
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY hack/deps.sh hack/deps.sh
RUN hack/deps.sh && rm -rf /var/lib/apt/lists/*
COPY Makefile ./
COPY hack hack
COPY common common
COPY engine engine
COPY operator operator
COPY autoscaler autoscaler
COPY router router
RUN CUDA=1 CINFER_VERSION="$VERSION" hack/build-image-rootfs.sh engine /out/engine

FROM nvidia/cuda:12.6.3-runtime-ubuntu24.04 AS engine-cuda
ARG VERSION
ARG REVISION
ARG SOURCE
LABEL org.opencontainers.image.title="cinfer-engine" \
      org.opencontainers.image.description="cinfer inference engine for GGUF models, CUDA backend (OpenAI-compatible HTTP API on :8000)" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.source="$SOURCE" \
      org.opencontainers.image.base.name="docker.io/nvidia/cuda:12.6.3-runtime-ubuntu24.04"
COPY --from=build-cuda /out/engine/usr/share/cinfer/runtime-packages /usr/share/cinfer/runtime-packages
RUN apt-get update \
 && xargs -a /usr/share/cinfer/runtime-packages apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nonroot
COPY --from=build-cuda /out/engine/usr/local/bin/cinfer-engine /usr/local/bin/cinfer-engine
ENV CINFER_ENGINE_HOST=0.0.0.0
USER 65532:65532
EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/cinfer-engine"]
CMD ["--help"]

# ---- engine (CPU) ----------------------------------------------------------------------------------
FROM debian:12-slim AS engine
ARG VERSION
ARG REVISION
ARG SOURCE
LABEL org.opencontainers.image.title="cinfer-engine" \
      org.opencontainers.image.description="cinfer inference engine for GGUF models, CPU backend (OpenAI-compatible HTTP API on :8000)" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.source="$SOURCE" \
      org.opencontainers.image.base.name="docker.io/library/debian:12-slim"
COPY --from=build /out/engine/usr/share/cinfer/runtime-packages /usr/share/cinfer/runtime-packages
RUN apt-get update \
 && xargs -a /usr/share/cinfer/runtime-packages apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nonroot
COPY --from=build /out/engine/usr/local/bin/cinfer-engine /usr/local/bin/cinfer-engine
# In a container the loopback default would be unreachable; a flag still wins over this.
ENV CINFER_ENGINE_HOST=0.0.0.0
USER 65532:65532
EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/cinfer-engine"]
CMD ["--help"]
