// The result of a compute-layer check: success, or an error with its kind and
// message. TensorFlow-free (the OpKernels turn it into an absl::Status, see
// ToStatus in tf_custom_op/kernels/conv2d_kernels.h) and usable from code
// nvcc compiles. The type is [[nodiscard]], so a check whose answer is
// dropped fails the -Werror build. (nvcc's front end also flags assigning a
// returned Status to an existing variable, as a discarded operator= result;
// code it compiles declares a new const Status per check instead.)
#ifndef TF_CONV2D_TRANSPOSE_STATUS_H_
#define TF_CONV2D_TRANSPOSE_STATUS_H_

#include <string>
#include <utility>

namespace conv2d_transpose {

// The kinds of error the ops report. They are the TensorFlow error classes
// the plugin's callers see: bad shapes and attributes are invalid arguments;
// a stride or dilation in the batch or depth dimension is unimplemented, as
// in TensorFlow's own kernels.
enum class StatusCode { kOk, kInvalidArgument, kUnimplemented };

class [[nodiscard]] Status {
 public:
  // Success.
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status Unimplemented(std::string message) {
    return Status(StatusCode::kUnimplemented, std::move(message));
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // Empty when ok().
  const std::string& message() const { return message_; }

  // The same error with `prefix` in front of its message (success stays
  // success), e.g. to name the op that failed.
  Status WithPrefix(const std::string& prefix) const {
    return ok() ? *this : Status(code_, prefix + message_);
  }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace conv2d_transpose

#endif  // TF_CONV2D_TRANSPOSE_STATUS_H_
