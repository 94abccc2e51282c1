"""tools/use_own_tensorflow.py, which `make PYTHON=...` runs in the user's
interpreter: it refuses a missing TensorFlow or one outside the window, and
installs only missing tools, with everything already installed pinned."""

import importlib.util
import pathlib
import re
import sys

import pytest
import tensorflow as tf

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "use_own_tensorflow", ROOT / "tools/use_own_tensorflow.py"
)
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


@pytest.mark.parametrize(
    "found, message",
    [
        (None, "has no TensorFlow"),
        (("tensorflow", "2.18.1"), "outside the supported window 2.19-2.21"),
        (("tensorflow-cpu", "2.22.0"), "outside the supported window 2.19-2.21"),
        (("tensorflow", "nightly"), "outside the supported window"),
    ],
)
def test_refuses_missing_or_unsupported_tensorflow(monkeypatch, found, message):
    monkeypatch.setattr(tool, "installed_tensorflow", lambda: found)
    with pytest.raises(SystemExit) as info:
        tool.check_tensorflow()
    assert message in str(info.value)


@pytest.mark.parametrize("found", [("tensorflow", "2.19.0"), ("tensorflow-cpu", "2.21.0")])
def test_accepts_either_distribution_in_the_window(monkeypatch, found):
    monkeypatch.setattr(tool, "installed_tensorflow", lambda: found)
    assert tool.check_tensorflow() == f"{found[0]}=={found[1]}"


def test_finds_the_tensorflow_of_this_interpreter():
    name, version = tool.installed_tensorflow()
    assert name in tool.DISTRIBUTIONS
    assert version == tf.__version__


def test_installs_only_missing_tools_with_installed_packages_pinned(monkeypatch, tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        "# tools\npytest==0.0.1  # installed: kept as it is\nno-such-tool-xyz>=1\n"
    )
    calls = []

    def fake_call(command):
        constraints = pathlib.Path(command[command.index("-c") + 1]).read_text().splitlines()
        calls.append((command, constraints))
        return 0

    monkeypatch.setattr(tool.subprocess, "call", fake_call)
    monkeypatch.setattr(sys, "argv", ["use_own_tensorflow.py", str(requirements)])
    assert tool.main() == 0
    [(command, constraints)] = calls
    assert command[-1:] == ["no-such-tool-xyz>=1"]  # pytest is installed: not asked for
    pins = {
        re.sub(r"[-_.]+", "-", name.lower()) + "==" + version
        for name, version in (line.split("==", 1) for line in constraints)
    }
    assert f"{tool.installed_tensorflow()[0]}=={tf.__version__}" in pins
    assert any(pin.startswith("pytest==") for pin in pins)


def test_installs_nothing_when_every_tool_is_there(monkeypatch):
    monkeypatch.setattr(tool.subprocess, "call", lambda command: pytest.fail(str(command)))
    monkeypatch.setattr(
        sys, "argv", ["use_own_tensorflow.py", str(ROOT / "requirements-tools.txt")]
    )
    assert tool.main() == 0
