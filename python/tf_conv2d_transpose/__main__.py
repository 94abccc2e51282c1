import sys

from tf_conv2d_transpose.cli import main

sys.exit(main())
