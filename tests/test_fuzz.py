"""The fuzzer (tests/fuzz_ops.py) in CI: 2,000 malformed and valid calls to
the three ops, in subprocess batches; any crash, unexpected exception or wrong
result fails. ``make fuzz`` runs 10,000+."""

import os
import subprocess
import sys

FUZZER = os.path.join(os.path.dirname(__file__), "fuzz_ops.py")


def test_two_thousand_fuzzed_calls_end_cleanly():
    cases = int(os.environ.get("FUZZ_CASES", "2000"))
    proc = subprocess.run(
        [sys.executable, FUZZER, "--cases", str(cases), "--batch", "250", "--seed", "1000"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert f"fuzzed {cases} cases" in proc.stdout
