# The CUDA backend (`make CUDA=1`, build directory build-cuda/): included by the Makefile.
#
# Host code (engine/backend/cuda/*.c) is compiled by $(CC) with the toolkit's headers; kernels
# (*.cu) by nvcc into real SASS for sm_80 (A100) and sm_90 (H100, H200) plus sm_90 PTX that newer
# GPUs JIT-compile, so no JIT runs at start-up on the first two. Both go into libengine.a; cudart is
# linked statically and cuBLAS is loaded at run time (cuda_blas.c), so a binary needs only the
# driver's libcuda.so.1 and a build needs no GPU, driver or cuBLAS library.
# The toolkit: CUDA_HOME if set, else /usr/local/cuda, else the nvcc on PATH, else the cached wheels
# of hack/cuda-toolkit.sh (installed on first use).

ifeq ($(filter clean fmt lint,$(MAKECMDGOALS)),)
ifeq ($(CUDA_HOME),)
CUDA_HOME := $(or $(if $(wildcard /usr/local/cuda/bin/nvcc),/usr/local/cuda),$(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null)))
endif
ifeq ($(CUDA_HOME),)
$(info cinfer: no CUDA toolkit found; running hack/cuda-toolkit.sh)
CUDA_HOME := $(shell ./hack/cuda-toolkit.sh)
endif
ifeq ($(wildcard $(CUDA_HOME)/bin/nvcc),)
$(error CUDA=1: no nvcc under CUDA_HOME=$(CUDA_HOME) (hack/cuda-toolkit.sh failed?))
endif
endif

NVCC        := $(CUDA_HOME)/bin/nvcc
CUDA_ARCHS  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
               -gencode arch=compute_90,code=compute_90
NVCCFLAGS   += -std=c++20 -O3 -g -lineinfo $(CUDA_ARCHS) -I. -MMD -MP --Werror all-warnings \
               -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-fno-strict-aliasing
CUDA_SRC    := $(sort $(wildcard engine/backend/cuda/*.c))
CUDA_CU_SRC := $(sort $(wildcard engine/backend/cuda/*.cu))
CUDA_CU_OBJS := $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(CUDA_CU_SRC))
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++

# Only the registry and the CUDA host files see CINFER_CUDA and the toolkit's headers.
CFLAGS_engine_backend_registry := -DCINFER_CUDA
$(BUILD)/obj/engine/backend/cuda/%.o: CFLAGS += -isystem $(CUDA_HOME)/include
$(BUILD)/obj/tests/engine/test_backend_cuda.o: CFLAGS += -DCINFER_CUDA

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -c $< -o $@

# make test's compile check (CUDA_REUSE=build, the CPU build it runs after) copies the engine and
# common objects compiled there with the same flags instead of compiling them again; only the
# registry (which names the CUDA backend under -DCINFER_CUDA), the CUDA files and the CUDA suite
# are compiled here. A pattern with a longer fixed part wins, and make falls back to the compile
# rules for objects the CPU build has none of (the CUDA files).
ifneq ($(CUDA_REUSE),)
$(BUILD)/obj/engine/%.o: $(CUDA_REUSE)/obj/engine/%.o
	@mkdir -p $(dir $@)
	$(Q)cp $< $@
$(BUILD)/obj/common/%.o: $(CUDA_REUSE)/obj/common/%.o
	@mkdir -p $(dir $@)
	$(Q)cp $< $@
$(BUILD)/obj/engine/backend/registry.o: engine/backend/registry.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) $(CFLAGS_engine_backend_registry) -c $< -o $@
endif

# The kernels join the engine library (its `ar` takes every prerequisite).
$(BUILD)/lib/libengine.a: $(CUDA_CU_OBJS)

# The CUDA engine and its engine test suites link only the engine and common libraries, so that
# `make test`'s CUDA compile check (build-cuda/) builds no operator or autoscaler code.
CUDA_ENGINE_LIBS := $(BUILD)/lib/libengine.a $(BUILD)/lib/libcommon.a
$(BUILD)/bin/cinfer-engine: $(BUILD)/obj/engine/main.o $(CUDA_ENGINE_LIBS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(CUDA_ENGINE_LIBS) $(LDLIBS) $(CUDA_LDLIBS)
$(BUILD)/tests/engine/%: $(BUILD)/obj/tests/engine/%.o $(BUILD)/obj/tests/engine/%.main.o $(CUDA_ENGINE_LIBS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(CUDA_ENGINE_LIBS) $(LDLIBS) $(CUDA_LDLIBS)
