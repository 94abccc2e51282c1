# Build, test and demo of the tf-conv2d-transpose plugin.
#   make          .venv (unless PYTHON=... is given), pinned requirements, the .so,
#                 editable install of the package
#   make test     everything above, then lint and the test suite
#   make demo     everything above, then the validation table and a side-by-side call
#   make clean    remove build outputs (keeps .venv); make distclean also removes .venv

SHELL := /bin/bash
MAKEFLAGS += --jobs=$(shell nproc)
ifeq ($(origin PYTHON), undefined)
  VENV := .venv
  PY := $(VENV)/bin/python
  STAMP_DIR := $(VENV)
else
  PY := $(PYTHON)
  STAMP_DIR := build
endif

CXX ?= g++
PKG := python/tf_conv2d_transpose
LIB := $(PKG)/_conv2d_transpose_ops.so
BUILD_INFO := $(PKG)/_build_info.json
SRC_DIR := tf_custom_op
OBJ_DIR := build/obj
# The compute layer (TF-free) and the TF-facing registration + kernel files.
SRCS := conv2d_problem.cc conv2d_backprop_input_cpu.cc \
        conv2d_transpose_ops.cc conv2d_backprop_input_kernel.cc
OBJS := $(addprefix $(OBJ_DIR)/,$(SRCS:.cc=.o))
HDRS := $(wildcard $(SRC_DIR)/*.h)

REQS_STAMP := $(STAMP_DIR)/.requirements.stamp
INSTALL_STAMP := $(STAMP_DIR)/.editable.stamp
TF_FLAGS := build/tf_flags.mk

# No -march=native: the library must run on any x86-64. TF's include dir is a
# system dir so its headers' warnings do not drown ours; ours are -Werror.
CXXFLAGS ?= -O3
CXXFLAGS += -fPIC -Wall -Wextra -Werror -Wno-deprecated-declarations

.PHONY: all build test demo lint cpp-test clean distclean
all: build $(INSTALL_STAMP)
build: $(LIB)

ifeq ($(origin PYTHON), undefined)
$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
endif

$(REQS_STAMP): requirements.txt | $(PY)
	@mkdir -p $(STAMP_DIR)
	$(PY) -m pip install --quiet -r requirements.txt
	@touch $@

# Compile and link flags come from the TensorFlow the library is built against.
$(TF_FLAGS): $(REQS_STAMP)
	@mkdir -p build
	$(PY) -c "import tensorflow as tf; \
	c = ' '.join(f.replace('-I', '-isystem ', 1) if f.startswith('-I') else f \
	             for f in tf.sysconfig.get_compile_flags()); \
	print('TF_CFLAGS :=', c); \
	print('TF_LFLAGS :=', ' '.join(tf.sysconfig.get_link_flags())); \
	print('TF_VERSION :=', tf.__version__)" 2>/dev/null > $@

-include $(TF_FLAGS)

$(OBJ_DIR)/%.o: $(SRC_DIR)/%.cc $(HDRS) $(TF_FLAGS)
	@mkdir -p $(OBJ_DIR)
	$(CXX) $(TF_CFLAGS) $(CXXFLAGS) -c $< -o $@

$(LIB): $(OBJS)
	$(CXX) -shared $(OBJS) -o $@ $(TF_LFLAGS) -Wl,--no-undefined -Wl,-O1
	printf '{"tensorflow_version": "%s", "cxx": "%s"}\n' "$(TF_VERSION)" \
	  "$$($(CXX) --version | head -1)" > $(BUILD_INFO)

$(INSTALL_STAMP): pyproject.toml $(REQS_STAMP)
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

# The TF-free compute layer alone, under AddressSanitizer and UBSan.
COMPUTE_TEST := build/compute_layer_test
$(COMPUTE_TEST): tests/cpp/compute_layer_test.cc $(SRC_DIR)/conv2d_problem.cc \
                 $(SRC_DIR)/conv2d_backprop_input_cpu.cc $(HDRS) $(TF_FLAGS)
	$(CXX) $(TF_CFLAGS) -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all \
	  -Wall -Wextra -Werror $(filter %.cc,$^) -o $@

cpp-test: $(COMPUTE_TEST)
	./$(COMPUTE_TEST)

lint: $(REQS_STAMP)
	$(PY) -m ruff check python tests bench
	$(PY) -m ruff format --check python tests bench

test: all lint cpp-test
	$(PY) -m pytest -n 2 tests

# TF_CPP_MIN_LOG_LEVEL=3 keeps TensorFlow's start-up logging out of the tables.
demo: all
	TF_CPP_MIN_LOG_LEVEL=3 $(PY) -m tf_conv2d_transpose validate
	TF_CPP_MIN_LOG_LEVEL=3 $(PY) -m tf_conv2d_transpose compare

clean:
	rm -rf build $(LIB) $(BUILD_INFO) $(STAMP_DIR)/.editable.stamp \
	  python/*.egg-info .pytest_cache .hypothesis
	find . -name __pycache__ -not -path './.venv/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf .venv
