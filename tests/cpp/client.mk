# The C++ client route: graph-building wrappers of the plugin's ops
# (tf_custom_op/cc/cc_ops.{h,cc}, the surface of tensorflow::ops::Conv2DBackprop*)
# as a shared library against the pip package's libtensorflow_cc.so.2, and a
# C++ program that uses them next to the built-ins in one graph and serves a
# Keras SavedModel, both through TensorFlow's C API (the pip package does not
# export the C++ ClientSession).
#
# Included by the Makefile after PY, PKG, LIB, BUILD_DIR, CXXFLAGS, TF_FLAGS and
# INSTALL_STAMP are defined (prerequisites are expanded when read).
#   make cpp-client        build/libconv2d_transpose_cc.so
#   make cpp-client-test   also export the SavedModel, build and run the program

CC_CLIENT_LIB := $(BUILD_DIR)/libconv2d_transpose_cc.so
CC_CLIENT_DIR := $(BUILD_DIR)/cc_client
CC_CLIENT_TEST := $(CC_CLIENT_DIR)/client_test
CC_CLIENT_EXPORT := $(CC_CLIENT_DIR)/export

# The tensorflow package directory (the -L of TF_LFLAGS) holds both libraries:
# libtensorflow_cc.so.2 has the C++ graph API (Scope, tensorflow::ops) and the
# C API; libtensorflow_framework.so.2 the framework (NodeBuilder, Tensor, protos).
# Deferred (=): TF_LFLAGS comes from $(TF_FLAGS), made on the first run.
TF_LIB_DIR = $(patsubst -L%,%,$(filter -L%,$(TF_LFLAGS)))
TF_CC_LFLAGS = -L$(TF_LIB_DIR) -l:libtensorflow_cc.so.2 \
               -l:libtensorflow_framework.so.2 -Wl,-rpath,$(TF_LIB_DIR)

.PHONY: cpp-client cpp-client-test
cpp-client: $(CC_CLIENT_LIB)

$(CC_CLIENT_DIR)/cc_ops.o: $(SRC_DIR)/$(CLIENT_SRC) $(SRC_DIR)/cc/cc_ops.h $(TF_FLAGS)
	@mkdir -p $(CC_CLIENT_DIR)
	$(CXX) $(TF_CFLAGS) $(INCLUDES) $(CXXFLAGS) -c $< -o $@

$(CC_CLIENT_LIB): $(CC_CLIENT_DIR)/cc_ops.o
	$(CXX) -shared $< -o $@ -Wl,-soname,libconv2d_transpose_cc.so $(TF_CC_LFLAGS) \
	  -Wl,--no-undefined -Wl,-O1

$(CC_CLIENT_DIR)/client_test.o: tests/cpp/client_test.cc $(SRC_DIR)/cc/cc_ops.h $(TF_FLAGS)
	@mkdir -p $(CC_CLIENT_DIR)
	$(CXX) $(TF_CFLAGS) $(INCLUDES) $(CXXFLAGS) -c $< -o $@

# $ORIGIN/..: the program finds libconv2d_transpose_cc.so wherever build/ is.
$(CC_CLIENT_TEST): $(CC_CLIENT_DIR)/client_test.o $(CC_CLIENT_LIB)
	$(CXX) $< -o $@ -L$(BUILD_DIR) -l:libconv2d_transpose_cc.so \
	  -Wl,-rpath,'$$ORIGIN/..' $(TF_CC_LFLAGS)

# A Keras SavedModel using the plugin's layer, a batch and Python's outputs.
$(CC_CLIENT_EXPORT)/expected.bin: tests/cpp/export_saved_model.py $(wildcard $(PKG)/*.py) \
                                  $(LIB) $(INSTALL_STAMP)
	rm -rf $(CC_CLIENT_EXPORT)
	TF_CPP_MIN_LOG_LEVEL=3 $(PY) tests/cpp/export_saved_model.py $(CC_CLIENT_EXPORT)

cpp-client-test: $(CC_CLIENT_TEST) $(CC_CLIENT_EXPORT)/expected.bin $(LIB)
	TF_CPP_MIN_LOG_LEVEL=2 $(CC_CLIENT_TEST) $(LIB) $(CC_CLIENT_EXPORT)
