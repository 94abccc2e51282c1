"""Forwards @rules_python's entry points to Bazel 4's native rules, so nothing is downloaded."""

load("@bazel_tools//tools/python:toolchain.bzl", _py_runtime_pair = "py_runtime_pair")

def py_binary(**kwargs):
    native.py_binary(**kwargs)

def py_library(**kwargs):
    native.py_library(**kwargs)

def py_runtime(**kwargs):
    native.py_runtime(**kwargs)

def py_test(**kwargs):
    native.py_test(**kwargs)

py_runtime_pair = _py_runtime_pair
