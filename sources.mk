# The source and flag tables of the C++ build, written once. The Makefile
# includes this file; tests/test_build_tables.py checks that BUILD (Bazel)
# names the same files and instruction-set flags.
#
# tf_custom_op/
#   compute/           TensorFlow-free: problem description and validation
#   compute/cpu/       CPU kernels and the run-time micro-kernel choice
#   compute/cpu/ukernels/  the micro-kernels, built once per instruction set
#   compute/gpu/       CUDA kernels (GPU=1); their bodies (conv2d_gpu_body.h)
#                      also build on the host (tests/cpp/gpu_emulator.mk)
#   kernels/           TensorFlow OpKernels: CPU, GPU, XLA lowerings
#   ops/               op registration and the baked-in build information
#   cc/                the C++ client API (tests/cpp/client.mk), not in the plugin
SRC_DIR := tf_custom_op
COMPUTE_SRCS := compute/conv2d_problem.cc compute/cpu/conv2d_backprop_input_cpu.cc \
                compute/cpu/conv2d_backprop_filter_cpu.cc compute/cpu/conv2d_forward_cpu.cc \
                compute/cpu/cpu_dispatch.cc
UKERNEL_SRC := compute/cpu/ukernels/cpu_tap_kernels.cc
PLUGIN_SRCS := ops/conv2d_transpose_ops.cc ops/build_info.cc kernels/conv2d_cpu_kernels.cc
GPU_PLUGIN_SRCS := kernels/conv2d_gpu_kernels.cc
CUDA_SRCS := compute/gpu/conv2d_gpu.cu.cc
XLA_SRC := kernels/conv2d_xla_kernels.cc
CLIENT_SRC := cc/cc_ops.cc

# The micro-kernels once per instruction set, picked at run time by
# cpu_dispatch.cc (the library itself still runs on any x86-64).
ISAS := generic avx2 avx512 avx512bf16
ISA_FLAGS_generic :=
ISA_FLAGS_avx2 := -mavx2 -mfma -mf16c
ISA_FLAGS_avx512 := -mavx512f -mavx512vl -mavx512bw -mavx512dq -mfma -mf16c \
                    -mprefer-vector-width=512
ISA_FLAGS_avx512bf16 := $(ISA_FLAGS_avx512) -mavx512bf16
# The choices CONV2D_TRANSPOSE_CPU_ISA takes: each set above, and "amx" (the
# avx512bf16 objects with their AMX pair kernel: no build of its own).
RUNTIME_ISAS := $(ISAS) amx
