# Build, test and demo of the tf-conv2d-transpose plugin.
#   make          .venv (unless PYTHON=... is given), pinned requirements, the .so,
#                 editable install of the package
#   make test     everything above, then lint, the compute layer under sanitizers and
#                 valgrind, the CUDA kernels' bodies emulated on the host, the C++
#                 client test, the GPU build on the CPU suite, the
#                 library under ASan/UBSan, the Bazel build + tests, a wheel round trip,
#                 and the pytest suite (2,000 fuzzed calls among it)
#   make GPU=1    the library with CUDA kernels as well (system nvcc)
#   make demo     everything above, then the validation table, a side-by-side call and
#                 the digits autoencoder trained with the Keras layer
#   make bench    side-by-side timings against the built-in and XLA (bench/results/);
#                 make compute-bench times the compute layer alone
#   make fuzz     10,000 fuzzed calls to both ops, with outcome counts
#   make asan / make valgrind   the sanitizer and memcheck runs of make test alone
#   make clean    remove build outputs (keeps .venv); make distclean also removes .venv

SHELL := /bin/bash
MAKEFLAGS += --jobs=$(shell nproc)
# `make clean test` must clean first, not while building.
ifneq ($(filter clean distclean,$(MAKECMDGOALS)),)
.NOTPARALLEL:
endif
# The default: the project's own .venv with the pinned TensorFlow. With
# PYTHON=..., the TensorFlow that interpreter already has (2.19-2.21), which is
# never installed, upgraded or removed: tools/use_own_tensorflow.py checks it
# and adds only the tools that interpreter lacks. Its build outputs get a
# directory of their own, so objects for two TensorFlows never mix.
ifeq ($(origin PYTHON), undefined)
  VENV := .venv
  PY := $(VENV)/bin/python
  BUILD_DIR ?= build
  STAMP_DIR := $(VENV)
  INSTALL_REQUIREMENTS := $(PY) -m pip install --quiet -r requirements.txt
  DEMO_REQUIREMENTS := true
else
  PY := $(PYTHON)
  BUILD_DIR ?= build/python-$(shell printf %s '$(PYTHON)' | sha1sum | cut -c1-10)
  STAMP_DIR := $(BUILD_DIR)
  INSTALL_REQUIREMENTS := $(PY) tools/use_own_tensorflow.py requirements-tools.txt
  DEMO_REQUIREMENTS := $(PY) tools/use_own_tensorflow.py requirements-demo.txt
  ifeq ($(filter clean distclean,$(MAKECMDGOALS)),)
    TF_CHECK := $(shell $(PY) tools/use_own_tensorflow.py --check 2>&1)
    ifneq ($(.SHELLSTATUS),0)
      $(error $(TF_CHECK))
    endif
  endif
endif

CXX ?= g++
PKG := python/tf_conv2d_transpose
# setup.py overrides BUILD_DIR and LIB to build a wheel's library apart.
LIB ?= $(PKG)/_conv2d_transpose_ops.so
OBJ_DIR := $(BUILD_DIR)/obj
include sources.mk
# GCC vectors wider than the baseline are passed between the file's own inlined
# helpers; the ABI note GCC gives for that (-Wpsabi) does not apply.
ISA_CXXFLAGS := -Wno-psabi
ISA_OBJS = $(foreach isa,$(ISAS),$(OBJ_DIR)/ukernels/cpu_tap_kernels_$(isa).o)
# Every header but the C++ client API's (tests/cpp/client.mk).
HDRS := $(filter-out $(SRC_DIR)/cc/%,$(shell find $(SRC_DIR) -name '*.h'))
# Sources include from the repository root ("tf_custom_op/compute/...").
INCLUDES := -iquote .

# The compute layer, built once per build directory as a static library that
# the plugin, the compute benchmark and the valgrind test link.
COMPUTE_LIB := $(BUILD_DIR)/libconv2d_compute.a
COMPUTE_OBJS := $(addprefix $(OBJ_DIR)/,$(COMPUTE_SRCS:.cc=.o)) $(ISA_OBJS)

# GPU=1 adds the CUDA kernels (system nvcc; SASS for sm_80 and sm_90 plus
# compute_90 PTX; cudart linked statically so the library needs no
# libcudart.so). The result still loads into tensorflow-cpu.
GPU ?=
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
NVCC_ARCH := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
ifneq ($(GPU),)
  PLUGIN_SRCS += $(GPU_PLUGIN_SRCS)
  GPU_OBJS := $(addprefix $(OBJ_DIR)/,$(CUDA_SRCS:.cu.cc=.cu.o))
  GPU_CFLAGS := -DGOOGLE_CUDA=1 -isystem $(CUDA_HOME)/include
  GPU_LFLAGS := -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lpthread
endif
OBJS := $(addprefix $(OBJ_DIR)/,$(PLUGIN_SRCS:.cc=.o)) $(GPU_OBJS)

REQS_STAMP := $(STAMP_DIR)/.requirements.stamp
INSTALL_STAMP := $(STAMP_DIR)/.editable.stamp
TF_FLAGS := $(BUILD_DIR)/tf_flags.mk
# What must be in place before TensorFlow is asked for its flags (setup.py
# empties it: the building environment already has TensorFlow).
TF_READY ?= $(REQS_STAMP)

# `make asan` sets these to build the library with sanitizers: LIB_SANITIZE
# for the compute layer and the link, TF_SANITIZE for the files that include TensorFlow's
# headers (whose absl templates GCC cannot constant-evaluate under UBSan).
LIB_SANITIZE ?=
TF_SANITIZE ?=
TF_FACING := $(PLUGIN_SRCS:.cc=) $(GPU_PLUGIN_SRCS:.cc=)

# No -march=native: the library must run on any x86-64. TF's include dir is a
# system dir so its headers' warnings do not drown ours; ours are -Werror.
CXXFLAGS ?= -O3
CXXFLAGS += -fPIC -Wall -Wextra -Werror -Wno-deprecated-declarations

.PHONY: all build test demo bench compute-bench lint format cpp-test valgrind asan fuzz bazel wheel-test gpu-test tf-versions clean distclean
all: build $(INSTALL_STAMP)
build: $(LIB)

ifeq ($(origin PYTHON), undefined)
$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
$(REQS_STAMP): | $(PY)
endif

$(REQS_STAMP): requirements.txt requirements-tools.txt requirements-demo.txt requirements-export.txt
	@mkdir -p $(STAMP_DIR)
	$(INSTALL_REQUIREMENTS)
	@touch $@

# Compile and link flags come from the TensorFlow the library is built against.
$(TF_FLAGS): $(TF_READY)
	@mkdir -p $(BUILD_DIR)
	$(PY) -c "import tensorflow as tf; \
	c = ' '.join(f.replace('-I', '-isystem ', 1) if f.startswith('-I') else f \
	             for f in tf.sysconfig.get_compile_flags()); \
	print('TF_CFLAGS :=', c); \
	print('TF_LFLAGS :=', ' '.join(tf.sysconfig.get_link_flags())); \
	print('TF_INCLUDE :=', tf.sysconfig.get_include()); \
	print('TF_VERSION :=', tf.__version__)" 2>/dev/null > $@

-include $(TF_FLAGS)

$(OBJ_DIR)/%.o: $(SRC_DIR)/%.cc $(HDRS) $(TF_FLAGS)
	@mkdir -p $(@D)
	$(CXX) $(TF_CFLAGS) $(GPU_CFLAGS) $(INCLUDES) $(CXXFLAGS) \
	  $(if $(filter $(TF_FACING),$*),$(TF_SANITIZE),$(LIB_SANITIZE)) -c $< -o $@

$(COMPUTE_LIB): $(COMPUTE_OBJS)
	rm -f $@ && ar rcs $@ $^

# The XLA lowerings (conv2d_xla_kernels.cc), for TensorFlow 2.20 and newer:
# 2.19's tf2xla headers include LLVM headers its pip package does not ship.
# They need two more of the package's bundled include dirs and link against
# libtensorflow_cc.so.2 (XLA's builder and TensorFlow's XLA op registry), which
# tf.sysconfig's link flags leave out. That file alone takes one to two
# minutes, so its object is built once per TensorFlow installation (keyed by
# the include dir) and shared by every variant built against it (plain, GPU,
# ASan, wheel): it takes no GPU or sanitizer flags (it only builds XLA graphs,
# at jit-compile time; the compute layer and the OpKernels are what the ASan
# build checks).
ifneq ($(TF_VERSION),)
ifeq ($(filter 2.19.%,$(TF_VERSION)),)
XLA_OBJ := build/xla/$(shell printf %s '$(TF_INCLUDE)' | sha1sum | cut -c1-10)/conv2d_xla_kernels.o
XLA_CFLAGS := -isystem $(TF_INCLUDE)/external/highwayhash \
              -isystem $(TF_INCLUDE)/external/farmhash_archive/src
XLA_LFLAGS := -l:libtensorflow_cc.so.2
OBJS += $(XLA_OBJ)
$(XLA_OBJ): $(SRC_DIR)/$(XLA_SRC) $(HDRS) $(TF_INCLUDE)/tensorflow/core/public/version.h
	@mkdir -p $(@D)
	$(CXX) $(TF_CFLAGS) $(XLA_CFLAGS) $(INCLUDES) $(CXXFLAGS) -c $< -o $@.tmp && mv $@.tmp $@
endif
endif

# The TensorFlow version the library is built against, baked into it.
$(OBJ_DIR)/ops/build_info.o: CXXFLAGS += -DTF_CONV2D_TRANSPOSE_TF_VERSION='"$(TF_VERSION)"'

$(OBJ_DIR)/ukernels/cpu_tap_kernels_%.o: $(SRC_DIR)/$(UKERNEL_SRC) $(HDRS) $(TF_FLAGS)
	@mkdir -p $(@D)
	$(CXX) $(TF_CFLAGS) $(INCLUDES) $(CXXFLAGS) $(LIB_SANITIZE) $(ISA_CXXFLAGS) \
	  -DCONV2D_CPU_ISA=$* $(ISA_FLAGS_$*) -c $< -o $@

# The CUDA compute layer includes no TensorFlow header; Eigen is not needed.
$(OBJ_DIR)/%.cu.o: $(SRC_DIR)/%.cu.cc $(HDRS) $(TF_FLAGS)
	@mkdir -p $(@D)
	$(NVCC) -x cu -std=c++17 -O3 -I. $(NVCC_ARCH) -D_GLIBCXX_USE_CXX11_ABI=1 \
	  -Xcompiler -fPIC,-Wall,-Wextra -Werror all-warnings -c $< -o $@

# The compute library the plugin links: its own build directory's, unless the
# caller names one already built with the flags it wants (make asan links the
# sanitized one of make cpp-test, make gpu-test the plain one: the compute
# layer takes no GPU flags).
PLUGIN_COMPUTE_LIB ?= $(COMPUTE_LIB)
$(LIB): $(OBJS) $(PLUGIN_COMPUTE_LIB)
	$(CXX) -shared $(OBJS) $(PLUGIN_COMPUTE_LIB) -o $@ $(TF_LFLAGS) $(XLA_LFLAGS) $(GPU_LFLAGS) \
	  $(LIB_SANITIZE) -Wl,--no-undefined -Wl,-O1

$(INSTALL_STAMP): pyproject.toml $(REQS_STAMP)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

# The TF-free compute layer alone, under AddressSanitizer and UBSan: the same
# sources built into a sanitized static library of its own (position
# independent: make asan links it into the sanitized plugin).
COMPUTE_TEST := $(BUILD_DIR)/compute_layer_test
SANITIZE_DIR := $(BUILD_DIR)/sanitize
SANITIZE := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all
SANITIZED_LIB := $(SANITIZE_DIR)/libconv2d_compute.a
$(SANITIZE_DIR)/%.o: $(SRC_DIR)/%.cc $(HDRS) $(TF_FLAGS)
	@mkdir -p $(@D)
	$(CXX) $(TF_CFLAGS) $(INCLUDES) $(SANITIZE) -fPIC -Wall -Wextra -Werror -c $< -o $@
$(SANITIZE_DIR)/ukernels/cpu_tap_kernels_%.o: $(SRC_DIR)/$(UKERNEL_SRC) $(HDRS) $(TF_FLAGS)
	@mkdir -p $(@D)
	$(CXX) $(TF_CFLAGS) $(INCLUDES) $(SANITIZE) -fPIC -Wall -Wextra -Werror $(ISA_CXXFLAGS) \
	  -DCONV2D_CPU_ISA=$* $(ISA_FLAGS_$*) -c $< -o $@
$(SANITIZED_LIB): $(addprefix $(SANITIZE_DIR)/,$(COMPUTE_SRCS:.cc=.o)) \
                  $(foreach isa,$(ISAS),$(SANITIZE_DIR)/ukernels/cpu_tap_kernels_$(isa).o)
	rm -f $@ && ar rcs $@ $^
$(COMPUTE_TEST): tests/cpp/compute_layer_test.cc tests/cpp/reference.h $(SANITIZED_LIB) $(HDRS) $(TF_FLAGS)
	$(CXX) $(TF_CFLAGS) $(INCLUDES) $(SANITIZE) -Wall -Wextra -Werror $< $(SANITIZED_LIB) -o $@

# The compute layer timed on its own, without TensorFlow (bench/compute_bench.cc).
COMPUTE_BENCH := $(BUILD_DIR)/compute_bench
$(COMPUTE_BENCH): bench/compute_bench.cc $(COMPUTE_LIB) $(HDRS) $(TF_FLAGS)
	$(CXX) $(TF_CFLAGS) $(INCLUDES) $(CXXFLAGS) -g $< $(COMPUTE_LIB) -o $@ -pthread
compute-bench: $(COMPUTE_BENCH)
	./$(COMPUTE_BENCH) float input && ./$(COMPUTE_BENCH) float filter

# Every micro-kernel this CPU can run, each under the sanitizers (ASan's
# LeakSanitizer included: a leak fails the run at exit), after the
# micro-kernel tester (tests/cpp/ukernel.mk) and the CUDA kernels' bodies run
# on the host (tests/cpp/gpu_emulator.mk).
cpp-test: $(COMPUTE_TEST) ukernel-test gpu-emulator-test
	for isa in $(RUNTIME_ISAS); do \
	  ASAN_OPTIONS=detect_leaks=1 CONV2D_TRANSPOSE_CPU_ISA=$$isa ./$(COMPUTE_TEST) || exit 1; done

# The same test uninstrumented under valgrind's memcheck (errors and leaks,
# fewer problems: valgrind is ~50x slower; it has no AVX-512, so the AVX2
# micro-kernel runs).
PLAIN_TEST := $(BUILD_DIR)/compute_layer_test_plain
$(PLAIN_TEST): tests/cpp/compute_layer_test.cc tests/cpp/reference.h $(COMPUTE_LIB) $(HDRS) $(TF_FLAGS)
	$(CXX) $(TF_CFLAGS) $(INCLUDES) -O1 -g -Wall -Wextra -Werror $< $(COMPUTE_LIB) -o $@
valgrind: $(PLAIN_TEST)
	tools/install_tool.sh valgrind valgrind
	valgrind --quiet --error-exitcode=1 --leak-check=full --show-leak-kinds=all \
	  --errors-for-leak-kinds=all ./$(PLAIN_TEST) 120 2000

# The plugin library itself built with AddressSanitizer + UBSan (UBSan on the
# compute layer, ASan everywhere; TensorFlow stays uninstrumented): the
# OpKernels compiled with ASan, linked with cpp-test's sanitized compute
# library (-O1; its -O3 build under ASan and UBSan took four minutes of
# make test for the same sources), then the
# core and training test files on it through tools/asan_tests.sh, which says
# how the runtime is preloaded, where reports go and which tests stay out.
# First a self-test: a deliberate invalid read must be reported and fail.
# Leak detection is off: Python and TensorFlow keep memory until exit by
# design (the C++ tests above check the compute layer's).
ASAN_DIR := build/asan
ASAN_LIB := $(ASAN_DIR)/_conv2d_transpose_ops.so
ASAN_TESTS := tests/test_numerics.py tests/test_backprop_filter.py tests/test_gradients.py \
              tests/test_bad_inputs.py tests/test_determinism.py
asan: $(REQS_STAMP) $(SANITIZED_LIB)
	$(MAKE) build BUILD_DIR=$(ASAN_DIR) LIB=$(ASAN_LIB) PLUGIN_COMPUTE_LIB=$(SANITIZED_LIB) \
	  LIB_SANITIZE="-g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" \
	  TF_SANITIZE="-g -fno-omit-frame-pointer -fsanitize=address"
	CXX=$(CXX) tools/asan_self_test.sh $(PY) $(ASAN_LIB)
	CXX=$(CXX) tools/asan_tests.sh $(PY) $(ASAN_LIB) $(ASAN_TESTS)

# 10,000+ fuzzed calls to both ops in subprocess batches (tests/fuzz_ops.py),
# with the outcome counts; CI runs 2,000 of them (tests/test_fuzz.py). Then
# the differential harness against the built-in (tests/test_differential.py)
# with 3,000 calls per mode instead of make test's 300.
# A new seed every run, so that each run explores new inputs; the seed is
# printed, and `make fuzz FUZZ_SEED=N` replays a run. make test's 2,000 keep
# a fixed seed.
FUZZ_CASES ?= 10000
FUZZ_SEED ?= $(shell date +%s)
fuzz: all
	@echo "fuzz seed $(FUZZ_SEED) (replay: make fuzz FUZZ_SEED=$(FUZZ_SEED))"
	TF_CPP_MIN_LOG_LEVEL=3 $(PY) tests/fuzz_ops.py --cases $(FUZZ_CASES) --batch 500 \
	  --seed $(FUZZ_SEED)
	DIFFERENTIAL_EXAMPLES=3000 HYPOTHESIS_PROFILE=default $(PY) -m pytest -q -p no:cacheprovider \
	  -n 2 --capture=sys --hypothesis-seed=$(FUZZ_SEED) tests/test_differential.py

# The same library and tests through Bazel (offline, Debian's Bazel 4), then
# the make smoke test on the library Bazel built.
BAZEL_LIB := build/bazel-bin/python/tf_conv2d_transpose/_conv2d_transpose_ops.so
bazel: $(REQS_STAMP)
	tools/install_tool.sh bazel bazel-bootstrap
	python_bin=$$($(PY) -c 'import sys; print(sys.executable)'); \
	bazel test --repo_env=PYTHON_BIN_PATH=$$python_bin \
	  --test_env=HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-default} //... && \
	TF_CPP_MIN_LOG_LEVEL=3 $(PY) tests/smoke.py --library $(BAZEL_LIB); \
	status=$$?; bazel shutdown; exit $$status

# Wheel round trip: build a wheel here, install it into a fresh venv (which
# pulls the pinned TensorFlow), run the smoke test there, outside the tree;
# the metadata must carry the extras (export, demo, bench).
WHEEL_DIR := build/dist
WHEEL_VENV := build/wheel-venv
wheel-test: $(REQS_STAMP)
	tools/wheel_test.sh $(PY) $(WHEEL_DIR) $(WHEEL_VENV)

# The GPU variant (GPU=1) built into build/gpu/, loaded into tensorflow-cpu
# (GPU kernels registered, unused) and run through the CPU suite; and the
# TF-free GPU harness that tests/gpu/device_check.sh runs on a GPU machine.
GPU_BUILD := BUILD_DIR=build/gpu LIB=build/gpu/_conv2d_transpose_ops.so GPU=1
gpu-test: $(REQS_STAMP) $(COMPUTE_LIB)
	$(MAKE) build $(GPU_BUILD) PLUGIN_COMPUTE_LIB=$(COMPUTE_LIB)
	tests/gpu/build_harness.sh build/gpu/harness.so
	TF_CPP_MIN_LOG_LEVEL=3 $(PY) tests/smoke.py --library build/gpu/_conv2d_transpose_ops.so
	TF_CONV2D_TRANSPOSE_LIBRARY=build/gpu/_conv2d_transpose_ops.so \
	TF_CONV2D_TRANSPOSE_EXPECT_GPU=1 $(PY) -m pytest -q -n 2 --capture=sys tests/test_kernel_registration.py \
	  tests/test_numerics.py tests/test_backprop_filter.py tests/test_gradients.py

# The supported TensorFlow window (README, "TensorFlow versions"): the library
# built against the oldest and a middle release in venvs of their own through
# `make PYTHON=...`, the smoke test and a core subset on each, and a library
# built for another TensorFlow, copied alone, refused by name.
TF_WINDOW := 2.19.1 2.20.0
tf-versions: build
	tools/tf_versions_test.sh "$(TF_WINDOW)" $(LIB)

# Python through ruff, C++ through clang-format (.clang-format), both from
# requirements-tools.txt; `make format` rewrites the C++ files in place.
CPP_FILES = $(shell find tf_custom_op tests/cpp tests/gpu bench -name '*.cc' -o -name '*.h')
CLANG_FORMAT = "$$($(PY) -c 'import clang_format; print(clang_format.get_executable("clang-format"))')"
lint: $(REQS_STAMP)
	$(PY) -m ruff check python tests bench tools
	$(PY) -m ruff format --check python tests bench tools
	$(CLANG_FORMAT) --dry-run --Werror $(CPP_FILES)
format: $(REQS_STAMP)
	$(CLANG_FORMAT) -i $(CPP_FILES)

# Lint, the compute layer under ASan/UBSan/LSan and under valgrind (and the
# CUDA kernels' bodies on the host, in cpp-test), the C++ client test
# (wrappers + SavedModel through the C API), the GPU variant on the CPU suite,
# the library under ASan/UBSan on the core test files, the Bazel route, the
# wheel round trip, then the pytest suite (last, so its summary closes the
# output; it includes 2,000 fuzzed calls). Hypothesis runs
# derandomized here (the `ci` profile in tests/conftest.py), so a red run
# replays exactly; --capture=sys lets a crashing worker's native message
# (a CHECK, a heap error) reach the terminal instead of pytest's capture.
test: export HYPOTHESIS_PROFILE = ci
test: all
	$(MAKE) lint cpp-test cpp-client-test valgrind
	$(MAKE) gpu-test
	$(MAKE) asan
	$(MAKE) bazel
	$(MAKE) wheel-test
	$(MAKE) tf-versions
	$(PY) -m pytest -n 2 --dist loadgroup --capture=sys tests

# TF_CPP_MIN_LOG_LEVEL=3 keeps TensorFlow's start-up logging out of the tables.
demo: all
	$(DEMO_REQUIREMENTS)
	TF_CPP_MIN_LOG_LEVEL=3 $(PY) -m tf_conv2d_transpose validate
	TF_CPP_MIN_LOG_LEVEL=3 $(PY) -m tf_conv2d_transpose compare
	TF_CPP_MIN_LOG_LEVEL=3 $(PY) -m tf_conv2d_transpose demo

# Side-by-side timings against the built-in and XLA (bench/README.md): tables,
# JSON and PNG charts into bench/results/, peak memory for the float32 runs;
# several minutes, not part of make test. The OpenBLAS variables this machine
# sets pin NumPy's sgemm (the peak column) to a slower kernel: unset for the
# benchmark only. matplotlib (for the charts) is installed here only.
BENCH_STAMP := $(STAMP_DIR)/.bench-requirements.stamp
$(BENCH_STAMP): bench/requirements.txt $(REQS_STAMP)
	$(PY) -m pip install --quiet -r bench/requirements.txt
	@touch $@
bench: all $(BENCH_STAMP)
	tools/bench.sh $(PY)

clean:
	rm -rf build $(LIB) $(STAMP_DIR)/.editable.stamp \
	  python/*.egg-info .pytest_cache .hypothesis
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf .venv

include tests/cpp/client.mk
include tests/cpp/ukernel.mk
include tests/cpp/gpu_emulator.mk
