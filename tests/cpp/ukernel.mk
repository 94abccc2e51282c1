# The micro-kernel tester (tests/cpp/ukernel_test.cc): the CPU micro-kernels of
# every instruction set this CPU can run, called directly through
# ukernel_table.h and checked against plain loops, all sets in one process
# (a set the CPU lacks is skipped with a line saying so). It runs twice: on
# the compute layer built with AddressSanitizer and UBSan (-O1), and on the
# -O3 library the plugin links, so the code that ships is checked too.
#
# Included by the Makefile after sources.mk and after COMPUTE_LIB,
# SANITIZED_LIB, SANITIZE, INCLUDES, TF_CFLAGS, HDRS, BUILD_DIR and TF_FLAGS
# are defined.
#   make ukernel-test   build both and run them (LeakSanitizer on)

UKERNEL_TEST := $(BUILD_DIR)/ukernel_test
UKERNEL_TEST_PLAIN := $(BUILD_DIR)/ukernel_test_plain

.PHONY: ukernel-test

$(UKERNEL_TEST): tests/cpp/ukernel_test.cc $(SANITIZED_LIB) $(HDRS) $(TF_FLAGS)
	$(CXX) $(TF_CFLAGS) $(INCLUDES) $(SANITIZE) -Wall -Wextra -Werror $< $(SANITIZED_LIB) -o $@

$(UKERNEL_TEST_PLAIN): tests/cpp/ukernel_test.cc $(COMPUTE_LIB) $(HDRS) $(TF_FLAGS)
	$(CXX) $(TF_CFLAGS) $(INCLUDES) -O1 -g -Wall -Wextra -Werror $< $(COMPUTE_LIB) -o $@

ukernel-test: $(UKERNEL_TEST) $(UKERNEL_TEST_PLAIN)
	ASAN_OPTIONS=detect_leaks=1 ./$(UKERNEL_TEST)
	./$(UKERNEL_TEST_PLAIN)
