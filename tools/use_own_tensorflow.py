"""Prepares an interpreter the user brought (`make PYTHON=...`) for the build.

    python tools/use_own_tensorflow.py REQUIREMENTS_FILE...
    python tools/use_own_tensorflow.py --check   # the TensorFlow check alone

Checks that it has TensorFlow (``tensorflow`` or ``tensorflow-cpu``) inside the
supported window, then installs only the requirements it lacks, with every
package it already has pinned at its installed version: TensorFlow and
everything else already there are never installed, upgraded or removed.
Exits non-zero, saying why, when TensorFlow is missing or outside the window.
Runs under the user's interpreter: standard library only.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
from typing import List, Optional, Tuple

#: The TensorFlow releases (major, minor) the project builds against and tests.
SUPPORTED = ((2, 19), (2, 20), (2, 21))
DISTRIBUTIONS = ("tensorflow-cpu", "tensorflow")


def installed_tensorflow() -> Optional[Tuple[str, str]]:
    """(distribution, version) of the TensorFlow installed here, if any."""
    for name in DISTRIBUTIONS:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def window_text() -> str:
    return f"{SUPPORTED[0][0]}.{SUPPORTED[0][1]}-{SUPPORTED[-1][0]}.{SUPPORTED[-1][1]}"


def check_tensorflow() -> str:
    """The installed TensorFlow as `name==version`; exits when unusable."""
    found = installed_tensorflow()
    if found is None:
        sys.exit(
            f"{sys.executable} has no TensorFlow (looked for {' or '.join(DISTRIBUTIONS)}). "
            "Install the one you want the plugin built for into it (for example "
            "`pip install tensorflow-cpu==2.21.0`, or the GPU `tensorflow`), or run "
            "`make` without PYTHON= to use the project's own .venv."
        )
    name, version = found
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None or (int(match[1]), int(match[2])) not in SUPPORTED:
        sys.exit(
            f"{sys.executable} has {name} {version}, outside the supported window "
            f"{window_text()}; nothing was installed or changed. Use a TensorFlow in the "
            "window, or `make` without PYTHON= for the project's own .venv."
        )
    return f"{name}=={version}"


def requirement_names(paths: List[str]) -> List[Tuple[str, str]]:
    """(distribution name, requirement line) of each requirement in `paths`."""
    found = []
    for path in paths:
        with open(path) as handle:
            for line in handle:
                line = line.split("#", 1)[0].strip()
                if not line or line.startswith("-"):
                    continue
                name = re.match(r"[A-Za-z0-9._-]+", line)[0]
                found.append((name, line))
    return found


def is_installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def main() -> int:
    tensorflow = check_tensorflow()
    print(f"building against {tensorflow} in {sys.executable}")
    if sys.argv[1:] == ["--check"]:
        return 0
    missing = [line for name, line in requirement_names(sys.argv[1:]) if not is_installed(name)]
    if not missing:
        return 0
    # Everything installed stays exactly as it is: pip may only add packages.
    pins = sorted(
        {
            f"{dist.metadata['Name']}=={dist.version}"
            for dist in importlib.metadata.distributions()
            if dist.metadata["Name"]
        }
    )
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write("\n".join(pins) + "\n")
    try:
        print("installing the missing tools:", " ".join(missing))
        command = [sys.executable, "-m", "pip", "install", "--quiet", "-c", constraints.name]
        return subprocess.call(command + missing)
    finally:
        os.unlink(constraints.name)


if __name__ == "__main__":
    sys.exit(main())
