"""A deliberate invalid read, run only by `make asan` to prove that a report
from a crashing pytest worker reaches the log and fails the sanitizer run
(pytest does not collect this file on its own: no test_ prefix)."""

import ctypes


def test_reads_address_eight():
    ctypes.string_at(8, 1)
