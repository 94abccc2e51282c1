"""Entry point of the Bazel py_tests: pytest on the files given as arguments,
without pytest's cache and with hypothesis' database in Bazel's writable temp dir."""

import os
import sys

import pytest

if __name__ == "__main__":
    scratch = os.environ.get("TEST_TMPDIR", ".")
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(scratch, "hypothesis"))
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
