"""sources.mk is the one table of C++ sources and instruction-set flags: the
Makefile includes it, and Bazel's BUILD, which cannot, must say the same."""

import pathlib
import re
from typing import Dict, List

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _make_variables(path: pathlib.Path) -> Dict[str, List[str]]:
    """The `NAME := words` assignments of a makefile (continuations joined,
    `$(NAME)` references expanded)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    values: Dict[str, List[str]] = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z_0-9]+)\s*:=(.*)$", line.split("#")[0])
        if not match:
            continue
        words = []
        for word in match.group(2).split():
            reference = re.fullmatch(r"\$\(([A-Za-z_0-9]+)\)", word)
            words += values[reference.group(1)] if reference else [word]
        values[match.group(1)] = words
    return values


def _bazel_targets() -> Dict[str, dict]:
    """Every rule BUILD declares, by name, with its arguments (BUILD is
    Starlark, which Python runs with stand-ins for Bazel's functions)."""
    targets: Dict[str, dict] = {}

    def rule(**kwargs: object) -> None:
        targets[str(kwargs["name"])] = kwargs

    namespace = {
        "load": lambda *args: None,
        "glob": lambda patterns: [],
        "TF_COPTS": [],
        "TF_VERSION": "",
        **{name: rule for name in ("cc_library", "cc_binary", "py_library", "py_test")},
    }
    exec(compile((ROOT / "BUILD").read_text(), "BUILD", "exec"), namespace)
    return targets


TABLE = _make_variables(ROOT / "sources.mk")
TARGETS = _bazel_targets()


def _in_tree(paths: List[str]) -> set:
    return {f"{TABLE['SRC_DIR'][0]}/{path}" for path in paths}


def test_every_source_file_is_in_the_table():
    on_disk = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "tf_custom_op").rglob("*.cc")
        if path.is_file()
    }
    listed = _in_tree(
        TABLE["COMPUTE_SRCS"] + TABLE["UKERNEL_SRC"] + TABLE["PLUGIN_SRCS"]
        + TABLE["GPU_PLUGIN_SRCS"] + TABLE["CUDA_SRCS"] + TABLE["XLA_SRC"] + TABLE["CLIENT_SRC"]
    )  # fmt: skip
    assert on_disk == listed


def test_bazel_builds_the_same_sources():
    """The CPU plugin: compute layer, micro-kernels, OpKernels, XLA, ops."""
    compute = {s for s in TARGETS["compute"]["srcs"] if s.endswith(".cc")}
    assert compute == _in_tree(TABLE["COMPUTE_SRCS"])
    plugin = TARGETS["python/tf_conv2d_transpose/_conv2d_transpose_ops.so"]
    assert {s for s in plugin["srcs"] if s.endswith(".cc")} == _in_tree(
        TABLE["PLUGIN_SRCS"] + TABLE["XLA_SRC"]
    )
    for isa in TABLE["ISAS"]:
        sources = {s for s in TARGETS[f"tap_kernels_{isa}"]["srcs"] if s.endswith(".cc")}
        assert sources == _in_tree(TABLE["UKERNEL_SRC"]), isa


def test_bazel_uses_the_same_instruction_set_flags():
    for isa in TABLE["ISAS"]:
        copts = TARGETS[f"tap_kernels_{isa}"]["copts"]
        flags = [flag for flag in copts if flag.startswith("-m")]
        assert flags == TABLE[f"ISA_FLAGS_{isa}"], isa
        assert f"-DCONV2D_CPU_ISA={isa}" in copts
