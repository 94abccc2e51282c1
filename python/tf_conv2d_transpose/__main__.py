import os
import sys

# Before TensorFlow is first imported (by the package), keep its start-up
# logging out of the command's output.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tf_conv2d_transpose.cli import main  # noqa: E402

sys.exit(main())
