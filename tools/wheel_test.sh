#!/usr/bin/env bash
# Wheel round trip: build a wheel of this tree with PYTHON (its TensorFlow),
# check what it holds (the library, the extras export/demo/bench), install it
# into a fresh venv (which pulls the pinned TensorFlow) and run the smoke test
# there, outside the tree.
#   tools/wheel_test.sh PYTHON WHEEL_DIR VENV
set -euo pipefail
python=$1 wheel_dir=$2 venv=$3
rm -rf "$wheel_dir" "$venv"
"$python" -m pip wheel --quiet --no-deps --no-build-isolation -w "$wheel_dir" .
"$python" - "$wheel_dir" <<'PY'
import glob
import sys
import zipfile

wheel = zipfile.ZipFile(glob.glob(f"{sys.argv[1]}/*.whl")[0])
print(wheel.filename)
print(*sorted(name for name in wheel.namelist() if name.endswith(".so")))
metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith("METADATA"))).decode()
for extra in ("export", "demo", "bench"):
    assert f"Provides-Extra: {extra}" in metadata, f"the wheel has no extra {extra!r}"
print(*[line for line in metadata.splitlines() if line.startswith("Requires-Dist")], sep="\n")
PY
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "$wheel_dir"/*.whl
root=$(pwd)
cd "$venv" && TF_CPP_MIN_LOG_LEVEL=3 bin/python "$root/tests/smoke.py"
