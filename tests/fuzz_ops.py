"""Fuzzer for the three raw ops (the two gradients and the forward Conv2D):
malformed and valid calls, in batches, each batch in
a subprocess so that a crash (signal, abort, CHECK failure) is seen as one.

    python tests/fuzz_ops.py --cases 10000 [--batch 500] [--seed 0] [--jobs 2]

Cases come from hypothesis strategies: a valid problem (shapes from
``Conv2DTransposeConfig``) in any of the five dtypes, then zero to three
mutations drawn from: ranks 0-5, negative / zero / huge dimensions and sizes,
2-, 3-, 4- and 5-element and int64 sizes, every attribute out of range or of
the wrong length, unknown strings, mismatched dtypes, empty tensors, NaN and
Inf values. Half the calls run eagerly, half inside a ``tf.function``.

Every call must either raise one of the expected exception classes
(InvalidArgumentError, ValueError, TypeError, NotFoundError for a dtype with no
kernel, UnimplementedError for strides or dilations in the batch or depth
dimension, as TensorFlow's reference kernels raise, and for the forward
Conv2D given NCHW) or return a result; an
unmutated call's result must match the float64 NumPy reference. Any other
outcome is a failure; a dead worker is a crash. The summary counts every
outcome; the exit status is non-zero on any failure. The cases and their
checks are in tests/fuzz_cases.py.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def worker(seed: int, count: int) -> dict:
    """Runs one batch in this process (TensorFlow is imported only here)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import fuzz_cases

    return fuzz_cases.run_batch(seed, count)


def run_batches(cases: int, batch: int, seed: int, jobs: int) -> int:
    """Runs the batches in subprocesses, prints the summary; returns the exit
    status (0: no crash, no failure)."""
    batches = [
        (seed + i, min(batch, cases - i * batch)) for i in range((cases + batch - 1) // batch)
    ]
    totals: collections.Counter = collections.Counter()
    failures, crashes = [], []
    start = time.time()

    def one(spec):
        batch_seed, count = spec
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", "--seed", str(batch_seed)]
            + ["--cases", str(count)],
            capture_output=True,
            text=True,
        )
        return batch_seed, proc

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for batch_seed, proc in pool.map(one, batches):
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            if proc.returncode != 0 or not lines:
                crashes.append(
                    f"batch seed {batch_seed}: exit status {proc.returncode}\n"
                    + proc.stderr[-2000:]
                )
                continue
            report = json.loads(lines[-1])
            totals.update(report["counts"])
            failures.extend(f"[seed {batch_seed}] {f}" for f in report["failures"])
    elapsed = time.time() - start
    print(
        f"fuzzed {totals['cases']} cases ({totals['calls']} calls) in {len(batches)} "
        f"subprocesses, {elapsed:.0f} s"
    )
    for key in sorted(totals):
        if key not in ("cases", "calls"):
            print(f"  {key}: {totals[key]}")
    print(f"  crashed subprocesses: {len(crashes)}")
    for text in crashes + failures[:20]:
        print("FAIL", text)
    return 1 if crashes or failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.seed, args.cases)))
        return 0
    return run_batches(args.cases, args.batch, args.seed, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
