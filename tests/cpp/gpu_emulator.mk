# The GPU emulator (tests/cpp/gpu_emulator_test.cc): the CUDA kernels' bodies
# (tf_custom_op/compute/gpu/conv2d_gpu_body.h) built by the host compiler and
# run for every (block, thread) of each launch, against the CPU compute layer,
# under AddressSanitizer and UBSan. No GPU and no nvcc needed, only CUDA's
# headers for the half types (without them the test says it is skipped).
#
# Included by the Makefile after sources.mk and after SANITIZED_LIB, SANITIZE,
# INCLUDES, TF_CFLAGS, HDRS, BUILD_DIR, CUDA_HOME and TF_FLAGS are defined.
#   make gpu-emulator-test   build and run it (part of make cpp-test)

GPU_EMULATOR_TEST := $(BUILD_DIR)/gpu_emulator_test

.PHONY: gpu-emulator-test

$(GPU_EMULATOR_TEST): tests/cpp/gpu_emulator_test.cc tests/cpp/reference.h $(SANITIZED_LIB) $(HDRS) $(TF_FLAGS)
	$(CXX) $(TF_CFLAGS) -isystem $(CUDA_HOME)/include $(INCLUDES) $(SANITIZE) -Wall -Wextra \
	  -Werror $< $(SANITIZED_LIB) -o $@

gpu-emulator-test: $(GPU_EMULATOR_TEST)
	ASAN_OPTIONS=detect_leaks=1 ./$(GPU_EMULATOR_TEST)
