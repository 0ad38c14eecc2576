# cinfer: one non-recursive Makefile; everything builds into $(BUILD)/.
#
#   make            build the four programs into build/bin/
#   make run        serve a model on 127.0.0.1:8000 (MODEL=path.gguf; default: the shipped stories260K)
#   make test       build and run every test suite (Check unit tests, corpus tests, e2e scripts)
#   make asan       the same tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench      engine benchmarks (see engine/BENCHMARKS.md)
#   make fuzz       libFuzzer targets (clang) into build-fuzz/fuzz/
#   make lint/fmt   clang-format check / rewrite, banned functions, hack/lint.sh (duplicate
#                   primitives, include cycles between engine folders)
#   make CUDA=1     add the CUDA backend (into build-cuda/; engine/backend/cuda/cuda.mk)
#
# Sources are discovered by directory, so a new module needs no Makefile edit:
#   common/**.c -> libcommon.a, engine/**.c -> libengine.a (main.c excluded), same for operator/,
#   autoscaler/, router/
#   tests/<prog>/test_<mod>.c -> one Check binary per suite, whose entry point is <mod>_suite()
#   tests/fuzz/fuzz_<name>.c  -> a libFuzzer target and a corpus runner over tests/fuzz/corpus/<name>/
#   tests/e2e/*.sh            -> whole-system scripts run after the unit suites

BUILD    ?= $(if $(filter 1,$(CUDA)),build-cuda,build)
SHARED   ?= $(abspath ../shared)
CC       ?= cc
V        ?= 0
Q        := $(if $(filter 1,$(V)),,@)

PKGS     := libcurl jansson openssl check yaml-0.1 zlib

# A fresh machine has none of the libraries: install them before anything asks pkg-config.
ifeq ($(filter clean fmt,$(MAKECMDGOALS)),)
ifneq ($(shell pkg-config --exists $(PKGS) 2>/dev/null && echo ok),ok)
$(info cinfer: build dependencies missing; running hack/deps.sh)
DEPS_STATUS := $(shell ./hack/deps.sh >&2 && echo ok)
ifneq ($(DEPS_STATUS),ok)
$(error hack/deps.sh failed; install: $(PKGS) (Debian: see hack/deps.sh))
endif
endif
endif

WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter \
            -Werror
OPT      ?= -O2
CFLAGS   += -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) -fno-strict-aliasing -pthread -I. -MMD -MP \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm -lpthread
LDFLAGS  += -pthread

# The sampler's vector helpers pass 32-byte vectors between always-inlined functions: no call
# crosses an ABI boundary, so GCC's note about the AVX vector ABI does not apply.
CFLAGS_engine_sched_sampler := $(if $(filter clang,$(CC)),,-Wno-psabi)

ifeq ($(SANITIZE),1)
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=address,undefined
endif

ifeq ($(CUDA),1)
include engine/backend/cuda/cuda.mk
endif
# make test also compiles the CUDA backend and links a CUDA engine and its op suite
# (installing a toolkit if none is here), so CUDA code never rots on machines without a GPU; the
# suite then SKIPs naming the missing device. CUDA_CHECK=0 leaves it out (sanitizer and fuzz
# builds always do).
CUDA_CHECK ?= $(if $(filter 1,$(CUDA) $(SANITIZE) $(FUZZ)),0,1)
# It builds into build-cuda-check/ for sm_90 only (real SASS, no PTX: a third of the nvcc time of
# the full list; `make CUDA=1` and hack/gpu-bundle.sh build every target into build-cuda/).
CUDA_CHECK_BINS := $(if $(filter 1,$(CUDA_CHECK)),build-cuda-check/bin/cinfer-engine \
                   build-cuda-check/tests/engine/test_backend_cuda)
# the op suite, when cuda-check built it (a bare `ls` would list the current directory)
CUDA_CHECK_TEST := $(filter %/test_backend_cuda,$(CUDA_CHECK_BINS))

find_c    = $(shell find $(1) -name '*.c' $(2) 2>/dev/null | sort)
obj_of    = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

COMMON_SRC     := $(call find_c,common)
ENGINE_SRC     := $(call find_c,engine,! -path engine/main.c ! -path 'engine/backend/cuda/*')
OPERATOR_SRC   := $(call find_c,operator,! -path operator/main.c)
AUTOSCALER_SRC := $(call find_c,autoscaler,! -path autoscaler/main.c)
ROUTER_SRC     := $(call find_c,router,! -path router/main.c)

LIB_COMMON     := $(BUILD)/lib/libcommon.a
LIB_ENGINE     := $(BUILD)/lib/libengine.a
LIB_OPERATOR   := $(BUILD)/lib/liboperator.a
LIB_AUTOSCALER := $(BUILD)/lib/libautoscaler.a
LIB_ROUTER     := $(BUILD)/lib/librouter.a
# Link order: programs before the engine core before common.
ALL_LIBS       := $(LIB_OPERATOR) $(LIB_AUTOSCALER) $(LIB_ROUTER) $(LIB_ENGINE) $(LIB_COMMON)

BINS := $(BUILD)/bin/cinfer-engine $(BUILD)/bin/cinfer-operator $(BUILD)/bin/cinfer-autoscaler \
        $(BUILD)/bin/cinfer-router

TEST_SRC   := $(sort $(wildcard tests/*/test_*.c))
TEST_BINS  := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
FUZZ_SRC   := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.c,%,$(FUZZ_SRC))
CORPUS_BINS := $(patsubst %,$(BUILD)/tests/fuzz/corpus_%,$(FUZZ_NAMES))

.PHONY: all test asan run bench fuzz fuzz-targets lint fmt clean venv cuda-check
.SECONDARY:
all: $(BINS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) $(CFLAGS_$(subst /,_,$*)) -c $< -o $@

define make_lib
$(1): $(call obj_of,$(2))
	@mkdir -p $$(dir $$@)
	@$$(if $$(Q),echo "  AR      $$@")
	$$(Q)rm -f $$@ && ar rcs $$@ $$^
endef
$(eval $(call make_lib,$(LIB_COMMON),$(COMMON_SRC)))
$(eval $(call make_lib,$(LIB_ENGINE),$(ENGINE_SRC) $(CUDA_SRC)))
$(eval $(call make_lib,$(LIB_OPERATOR),$(OPERATOR_SRC)))
$(eval $(call make_lib,$(LIB_AUTOSCALER),$(AUTOSCALER_SRC)))
$(eval $(call make_lib,$(LIB_ROUTER),$(ROUTER_SRC)))

$(BUILD)/bin/cinfer-%: $(BUILD)/obj/%/main.o $(ALL_LIBS) $(CUDA_OBJS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(ALL_LIBS) $(CUDA_OBJS) $(LDLIBS) $(CUDA_LDLIBS)

# Suites define <mod>_suite() without a header; tests/check_main.c declares it.
$(BUILD)/obj/tests/%.o: CFLAGS += -Wno-missing-prototypes

# One Check binary per suite: test_<mod>.c plus a main that runs <mod>_suite().
$(BUILD)/obj/tests/%.main.o: tests/check_main.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS) -DCINFER_SUITE=$(patsubst test_%,%,$(notdir $*))_suite -c $< -o $@

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/obj/tests/%.main.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(ALL_LIBS) $(CUDA_OBJS) $(LDLIBS) $(CUDA_LDLIBS)

# Corpus runners replay every checked-in input of a fuzz target without libFuzzer (gcc, any build).
$(BUILD)/tests/fuzz/corpus_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/obj/tests/fuzz/corpus_main.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(ALL_LIBS) $(CUDA_OBJS) $(LDLIBS) $(CUDA_LDLIBS)

# Python clients the e2e tests drive the engine with (the official OpenAI SDK), in a virtualenv
# shared by every build directory; rebuilt when the pinned requirements change.
VENV     ?= build/venv
PYTHON   ?= python3

$(VENV)/.installed: hack/requirements-test.txt
	@echo "  VENV    $(VENV)"
	$(Q)rm -rf $(VENV) && $(PYTHON) -m venv $(VENV) && \
	  $(VENV)/bin/pip install --quiet --disable-pip-version-check -r hack/requirements-test.txt && \
	  touch $@

venv: $(VENV)/.installed

test: $(BINS) $(TEST_BINS) $(CORPUS_BINS) $(VENV)/.installed cuda-check
	$(Q)CINFER_BUILD=$(BUILD) CINFER_SHARED=$(SHARED) CINFER_VENV=$(abspath $(VENV)) \
	  ./hack/run-tests.sh $(TEST_BINS) $(CORPUS_BINS) \
	  $(if $(CUDA_CHECK_TEST),$$(ls $(CUDA_CHECK_TEST) 2>/dev/null))

# After the CPU build, whose engine and common objects it reuses (CUDA_REUSE, cuda.mk); without a
# toolkit (hack/cuda-toolkit.sh cannot install one) the check says SKIP and make test goes on.
cuda-check: $(BINS)
	$(Q)if [ -n "$(CUDA_CHECK_BINS)" ]; then \
	  if root=$$(./hack/cuda-toolkit.sh); then \
	    $(MAKE) --no-print-directory CUDA=1 BUILD=build-cuda-check CUDA_HOME="$$root" \
	      CUDA_REUSE=$(BUILD) CUDA_ARCHS="-gencode arch=compute_90,code=sm_90" \
	      $(CUDA_CHECK_BINS); \
	  else rm -f $(CUDA_CHECK_BINS); \
	    echo "SKIP: CUDA compile check: no CUDA toolkit (hack/cuda-toolkit.sh failed)"; fi; fi

asan:
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan SANITIZE=1 OPT=-O1 test

run: $(BUILD)/bin/cinfer-engine
	$(Q)MODEL="$(MODEL)" ./hack/run-engine.sh $(BUILD)/bin/cinfer-engine

bench: $(BUILD)/bin/cinfer-engine
	$(Q)./hack/bench.sh $(BUILD)/bin/cinfer-engine

# libFuzzer: every source is compiled again with clang into build-fuzz/ (coverage instrumentation
# plus ASan/UBSan), and each target links only what it uses from the libraries. Then run e.g.
#   mkdir -p /tmp/new && build-fuzz/fuzz/fuzz_prom /tmp/new tests/fuzz/corpus/prom -max_total_time=60
# (libFuzzer writes new inputs into the first directory: keep it out of the checked-in corpus and
# copy only inputs worth keeping, such as crashers once fixed.)
ifeq ($(FUZZ),1)
CC       := clang
WARN     := $(filter-out -Werror,$(WARN))
CFLAGS   += -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
LDFLAGS  += -fsanitize=address,undefined
endif
fuzz:
	$(Q)$(MAKE) --no-print-directory BUILD=build-fuzz FUZZ=1 OPT=-O1 fuzz-targets
fuzz-targets: $(patsubst %,$(BUILD)/fuzz/fuzz_%,$(FUZZ_NAMES))
$(BUILD)/fuzz/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $< $(ALL_LIBS) $(LDLIBS)

LINT_FILES = $(shell git ls-files '*.c' '*.h' '*.cu' 2>/dev/null)
BANNED     := \b(sprintf|strcpy|strcat|strtok|gets|atoi|atol|atof)[[:space:]]*\(
lint:
	$(Q)clang-format --dry-run --Werror $(LINT_FILES)
	$(Q)if grep -nE '$(BANNED)' $(LINT_FILES); then echo "lint: banned function (see STYLE.md)"; exit 1; fi
	$(Q)./hack/lint.sh # one copy of each primitive; no include cycle between engine folders
	@echo "lint: ok"
fmt:
	$(Q)clang-format -i $(LINT_FILES)

clean:
	rm -rf build build-asan build-fuzz build-cuda build-cuda-check

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
