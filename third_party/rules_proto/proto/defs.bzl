"""Forwards @rules_proto's entry points to Bazel 4's native rules, so nothing is downloaded."""

def proto_lang_toolchain(**kwargs):
    native.proto_lang_toolchain(**kwargs)

def proto_library(**kwargs):
    native.proto_library(**kwargs)

ProtoInfo = ProtoInfo
