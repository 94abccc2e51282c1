"""Before/after comparison of two builds of the plugin on the bench's layer grid.

Each (op, dtype) runs in a fresh process per build, the two builds taking turns
(A B, then B A, ...), and every process times the plugin and TensorFlow's
built-in side by side, so a machine that slows down between processes shows in
both columns of one run. A build is a checkout whose ``python/`` holds its
compiled library (``make build``), e.g. a ``git worktree`` of an older commit.

    .venv/bin/python tools/ab_layers.py run --before /tmp/before --after . \\
        --dtypes float32,bfloat16 --rounds 3 --out /tmp/ab
    .venv/bin/python tools/ab_layers.py summarize /tmp/ab

``summarize`` prints, per layer, each run's plugin median (ms), the ratio of
the medians after/before, "faster"/"SLOWER" only when every run of one build
beats every run of the other, and the plugin's speed relative to the built-in
before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

_WORKER = """
import json, statistics, sys, time
import tensorflow as tf
from tf_conv2d_transpose import benchmark as b
which, dtype, repeats = sys.argv[1], tf.as_dtype(sys.argv[2]), int(sys.argv[3])
builtin, all_layers = sys.argv[4], sys.argv[5] == "1"
kinds = ("plugin", "builtin") if builtin == "1" else ("plugin",)
ops = {k: b._op(k, which) for k in kinds}
# A call is timed until it returns; synchronously its result is computed then
# (not copied out: .numpy() would add the copy to both columns).
assert tf.config.experimental.get_synchronous_execution()
out = {}
layers = [(n, c) for n, c, _ in b.SHAPES] if all_layers else b.shapes_for(dtype)
for name, config in layers:
    sizes, a, dy = b._operands(config, which, dtype)
    attrs = config.op_attrs()
    times = {}
    for k, op in ops.items():
        try:
            op(sizes, a, dy, attrs)
            op(sizes, a, dy, attrs)
            times[k] = []
        except tf.errors.InvalidArgumentError:
            pass
    for _ in range(repeats):
        for k in times:
            start = time.perf_counter()
            ops[k](sizes, a, dy, attrs)
            times[k].append(time.perf_counter() - start)
    out[name] = {k: statistics.median(v) * 1e3 for k, v in times.items()}
print(json.dumps(out))
"""


def run(args: argparse.Namespace) -> None:
    """Times every (op, dtype) in alternating processes of the two builds."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    builds = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    for r in range(1, args.rounds + 1):
        order = ["before", "after"] if r % 2 else ["after", "before"]
        for dtype in args.dtypes.split(","):
            for op in args.ops.split(","):
                for build in order:
                    root = builds[build]
                    builtin = "0" if dtype == "float16" else "1"  # Eigen's float16 is slow
                    result = subprocess.run(
                        [str(root / ".venv/bin/python"), "-c", _WORKER, op, dtype,
                         str(args.repeats), builtin, "1" if args.all_layers else "0"],
                        cwd=root, env={"PYTHONPATH": str(root / "python"), "PATH": "/usr/bin:/bin"},
                        capture_output=True, text=True, check=True,
                    )  # fmt: skip
                    (out / f"{build}-{op}-{dtype}-{r}.json").write_text(result.stdout)
                    print(time.strftime("%H:%M:%S"), build, op, dtype, r, flush=True)


def _geomean(values: List[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(args: argparse.Namespace) -> None:
    """Prints the per-layer table of a `run` directory."""
    runs: Dict[tuple, List[Dict[str, float]]] = defaultdict(list)
    for path in sorted(Path(args.dir).glob("*.json")):
        build, op, dtype, _ = path.stem.split("-")
        for name, times in json.loads(path.read_text()).items():
            runs[(dtype, op, name, build)].append(times)
    for dtype in sorted({k[0] for k in runs}):
        for op in ("input", "filter"):
            names = sorted({k[2] for k in runs if k[:2] == (dtype, op)})
            if not names:
                continue
            print(f"\n{dtype} {op}: layer | before ms | after ms | after/before | vs built-in")
            ratios, relative = [], []
            for name in names:
                before = [t["plugin"] for t in runs[(dtype, op, name, "before")]]
                after = [t["plugin"] for t in runs[(dtype, op, name, "after")]]
                if not before or not after:
                    continue
                ratio = statistics.median(after) / statistics.median(before)
                ratios.append(ratio)
                verdict = ("faster" if max(after) < min(before)
                           else "SLOWER" if min(after) > max(before) else "")  # fmt: skip
                vs = ""
                b = [t["builtin"] / t["plugin"] for t in runs[(dtype, op, name, "before")]
                     if "builtin" in t]  # fmt: skip
                a = [t["builtin"] / t["plugin"] for t in runs[(dtype, op, name, "after")]
                     if "builtin" in t]  # fmt: skip
                if a and b:
                    vs = f"{statistics.median(b):.2f}x -> {statistics.median(a):.2f}x"
                    relative.append(statistics.median(a) / statistics.median(b))
                cols = " ".join(f"{v:7.2f}" for v in before), " ".join(f"{v:7.2f}" for v in after)
                print(f"  {name:32s} {cols[0]} | {cols[1]} | {ratio:5.2f} {verdict:6s} | {vs}")
            line = f"  geomean after/before {_geomean(ratios):.3f}"
            if relative:
                line += f"; vs built-in after/before {_geomean(relative):.3f}"
                after_vs = [statistics.median([t["builtin"] / t["plugin"] for t in
                            runs[(dtype, op, n, "after")] if "builtin" in t] or [1.0])
                            for n in names]  # fmt: skip
                line += f"; after vs built-in geomean {_geomean(after_vs):.2f}x"
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--before", required=True)
    r.add_argument("--after", required=True)
    r.add_argument("--dtypes", default="float32,bfloat16,float16")
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--repeats", type=int, default=7)
    r.add_argument("--ops", default="input,filter")
    r.add_argument("--all-layers", action="store_true",
                   help="every layer of the float32 grid, also for the 16-bit types")  # fmt: skip
    r.add_argument("--out", required=True)
    s = sub.add_parser("summarize")
    s.add_argument("dir")
    args = parser.parse_args()
    (run if args.command == "run" else summarize)(args)


if __name__ == "__main__":
    sys.exit(main())
