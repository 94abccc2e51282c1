#!/usr/bin/env bash
# The supported TensorFlow window, each version in a venv of its own:
#   tools/tf_versions_test.sh "2.19.1 2.20.0" LIBRARY
# For each version: install that tensorflow-cpu into build/tf-VERSION/venv,
# build the library against it through `make PYTHON=...` (which must leave
# TensorFlow exactly as it was), then the smoke test and a core subset of the
# suite (numerics, API, gradients, layer) with the package laid out beside
# that library. Last, LIBRARY (built for another TensorFlow) is copied alone
# into a directory and loading it must fail with the clear version message.
set -euo pipefail
versions=$1 foreign_library=$(realpath "$2")
root=$(pwd)
for version in $versions; do
  dir=$root/build/tf-$version
  venv=$dir/venv
  echo "=== TensorFlow $version"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet "tensorflow-cpu==$version"
  fi
  before=$("$venv/bin/python" -m pip freeze | grep -i '^tensorflow')
  # The package as an installed copy would lay it out, the library inside it.
  rm -rf "$dir/site" && mkdir -p "$dir/site"
  cp -r python/tf_conv2d_transpose "$dir/site/"
  rm -f "$dir"/site/tf_conv2d_transpose/*.so  # the .venv's library, if built
  make build PYTHON="$venv/bin/python" BUILD_DIR="$dir/build" \
    LIB="$dir/site/tf_conv2d_transpose/_conv2d_transpose_ops.so"
  after=$("$venv/bin/python" -m pip freeze | grep -i '^tensorflow')
  if [ "$before" != "$after" ]; then
    echo "make PYTHON=... changed TensorFlow: '$before' -> '$after'" >&2
    exit 1
  fi
  export PYTHONPATH=$dir/site TF_CPP_MIN_LOG_LEVEL=3
  "$venv/bin/python" tests/smoke.py
  # The window check is about building and loading against each version;
  # the full random search runs on the pinned one. test_xla.py runs where the
  # library has the XLA lowerings (2.20 and newer) and is skipped for 2.19.
  HYPOTHESIS_PROFILE=quick "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 \
    --capture=sys tests/test_numerics.py tests/test_api.py tests/test_gradients.py \
    tests/test_layers.py tests/test_xla.py
  # A library built for another TensorFlow, copied alone: refused by name.
  copy=$dir/foreign && rm -rf "$copy" && mkdir -p "$copy" && cp "$foreign_library" "$copy/"
  built=$(grep -a -o 'tf_conv2d_transpose build info: tensorflow=[^;]*' "$foreign_library" | cut -d= -f2)
  TF_CONV2D_TRANSPOSE_LIBRARY=$copy/$(basename "$foreign_library") \
    "$venv/bin/python" - "$built" <<'PY'
import sys

import tensorflow as tf

built = sys.argv[1]
assert built and built != tf.__version__, (built, tf.__version__)
try:
    import tf_conv2d_transpose  # noqa: F401
except ImportError as error:
    message = str(error)
    assert built in message and tf.__version__ in message, message
    print(f"a library built for {built}, copied alone, refused under {tf.__version__}: ok")
else:
    raise SystemExit(f"a library built for {built} loaded into TensorFlow {tf.__version__}")
PY
  unset PYTHONPATH
done
