"""GPU check of the CUDA compute layer without TensorFlow (run by device_check.sh).

    python tests/gpu/check_gpu.py --harness build/gpu/harness.so --out DIR [--quick]
    python tests/gpu/check_gpu.py --selftest-references   # CPU: torch refs vs NumPy

Correctness: a seeded random grid over every feature (NHWC/NCHW, strides,
dilations, groups, SAME/VALID/EXPLICIT asymmetric padding) and dtype, both
gradients, against PyTorch in float64: Conv2DBackpropInput against
torch.nn.functional.conv_transpose2d (filter [KH,KW,Cg,Co] -> [Co,Cg,KH,KW],
asymmetric padding by cropping a padding-0 result) and Conv2DBackpropFilter
against torch.nn.grad.conv2d_weight (asymmetric padding applied to the input).
Bounds scale with the summed magnitudes (one result rounding plus the
accumulation), int32 must be exact; repeated runs must be bitwise identical.
Speed: CUDA-event medians against torch (cuDNN) on the layers of bench/.
Writes results.json and prints a summary; exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import importlib.util
import json
import os
import pathlib
import statistics
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEVICE = "cuda"


def _load_testing():
    # The package's __init__ imports TensorFlow, absent here: load the
    # NumPy-only module by path.
    spec = importlib.util.spec_from_file_location(
        "conv_testing", ROOT / "python" / "tf_conv2d_transpose" / "testing.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules["conv_testing"] = module
    spec.loader.exec_module(module)
    return module


testing = _load_testing()
Config = testing.Conv2DTransposeConfig

TORCH_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
}
EPS = {
    "float64": (2.0**-53, 2.0**-53),
    "float32": (2.0**-24, 2.0**-24),
    "float16": (2.0**-11, 2.0**-24),
    "bfloat16": (2.0**-8, 2.0**-24),
}
SUBNORMAL = {"float64": 5e-324, "float32": 1.4e-45, "float16": 6e-8, "bfloat16": 9.2e-41}


def pads(config):
    """(top, bottom, left, right) as TensorFlow resolves them."""
    c = config
    _, top, bottom = testing.forward_output_size(
        c.in_rows, c.filter_rows, c.stride[0], c.dilation[0], c.padding, c.explicit[:2]
    )
    _, left, right = testing.forward_output_size(
        c.in_cols, c.filter_cols, c.stride[1], c.dilation[1], c.padding, c.explicit[2:]
    )
    return top, bottom, left, right


def to_nchw(config, t):
    return t if config.nchw else t.permute(0, 3, 1, 2)


def from_nchw(config, t):
    return t if config.nchw else t.permute(0, 2, 3, 1)


def torch_backprop_input(config, filters, out_backprop):
    """Conv2DBackpropInput through conv_transpose2d (padding 0, then crop)."""
    c = config
    top, _, left, _ = pads(c)
    weight = filters.permute(3, 2, 0, 1)  # [Co, Cg, KH, KW]
    full = F.conv_transpose2d(
        to_nchw(c, out_backprop), weight, stride=c.stride, dilation=c.dilation, groups=c.groups
    )
    # Rows/cols past the last tap are never reached: pad with zeros to crop.
    need_rows = top + c.in_rows - full.shape[2]
    need_cols = left + c.in_cols - full.shape[3]
    full = F.pad(full, (0, max(need_cols, 0), 0, max(need_rows, 0)))
    return from_nchw(c, full[:, :, top : top + c.in_rows, left : left + c.in_cols])


def torch_backprop_filter(config, x, out_backprop):
    """Conv2DBackpropFilter through conv2d_weight on the explicitly padded input."""
    c = config
    top, bottom, left, right = pads(c)
    padded = F.pad(to_nchw(c, x), (left, right, top, bottom))
    weight_size = (c.out_depth, c.in_depth // c.groups, c.filter_rows, c.filter_cols)
    grad = torch.nn.grad.conv2d_weight(
        padded,
        weight_size,
        to_nchw(c, out_backprop),
        stride=c.stride,
        dilation=c.dilation,
        groups=c.groups,
    )
    return grad.permute(2, 3, 1, 0)  # [KH, KW, Cg, Co]


def random_config(rng):
    groups = int(rng.integers(1, 5))
    padding = str(rng.choice(["SAME", "VALID", "EXPLICIT"]))
    kernel = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    dilation = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    explicit = tuple(int(v) for v in rng.integers(0, 4, 4)) if padding == "EXPLICIT" else (0,) * 4
    sizes = []
    for axis in range(2):
        effective = (kernel[axis] - 1) * dilation[axis] + 1
        low = 1 if padding == "SAME" else max(1, effective - sum(explicit[2 * axis : 2 * axis + 2]))
        sizes.append(int(rng.integers(low, low + 24)))
    return Config(
        batch=int(rng.integers(1, 5)),
        in_rows=sizes[0],
        in_cols=sizes[1],
        in_depth=groups * int(rng.choice([1, 3, 4, 8, 17, 32])),
        out_depth=groups * int(rng.choice([1, 2, 5, 8, 16, 33])),
        filter_rows=kernel[0],
        filter_cols=kernel[1],
        stride=(int(rng.integers(1, 4)), int(rng.integers(1, 4))),
        dilation=dilation,
        padding=padding,
        explicit=explicit,
        groups=groups,
        data_format=str(rng.choice(["NHWC", "NCHW"])),
    )


def spec(config):
    c = config
    code = {"SAME": 0, "VALID": 1, "EXPLICIT": 2}[c.padding]
    values = [
        c.batch,
        c.in_rows,
        c.in_cols,
        c.in_depth,
        c.filter_rows,
        c.filter_cols,
        c.out_depth,
        *c.stride,
        *c.dilation,
        code,
        *c.explicit,
        int(c.nchw),
        c.groups,
    ]
    return (ctypes.c_int64 * len(values))(*values)


class Harness:
    def __init__(self, path):
        self.lib = ctypes.CDLL(str(path))
        self.lib.conv2d_gradient.restype = ctypes.c_int
        self.lib.conv2d_gradient.argtypes = [
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_int64),
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_int,
        ]

    def run(self, op, dtype, config, a, b, out):
        error = ctypes.create_string_buffer(512)
        stream = torch.cuda.current_stream().cuda_stream
        status = self.lib.conv2d_gradient(
            op,
            dtype.encode(),
            spec(config),
            a.data_ptr(),
            b.data_ptr(),
            out.data_ptr(),
            stream,
            error,
            512,
        )
        if status != 0:
            raise RuntimeError(error.value.decode())
        return out


def random_tensor(shape, dtype, generator, device):
    if dtype == "int32":
        return torch.randint(-3, 4, shape, generator=generator, dtype=torch.int32).to(device)
    return (
        torch.randn(shape, generator=generator, dtype=torch.float64)
        .to(device)
        .to(TORCH_DTYPES[dtype])
    )


def check_one(harness, op, dtype, config, generator):
    """Returns (max error, bound ok, bitwise repeatable)."""
    device = DEVICE
    c = config
    if op == 0:
        a = random_tensor(c.filter_shape, dtype, generator, device)
        b = random_tensor(c.out_backprop_shape, dtype, generator, device)
        out_shape, reference, terms = (
            c.input_shape,
            torch_backprop_input,
            (c.out_depth // c.groups) * c.filter_rows * c.filter_cols,
        )
    else:
        a = random_tensor(c.input_shape, dtype, generator, device)
        b = random_tensor(c.out_backprop_shape, dtype, generator, device)
        rows, cols = c.out_size()
        out_shape, reference, terms = c.filter_shape, torch_backprop_filter, c.batch * rows * cols
    out = torch.full(out_shape, 7, dtype=TORCH_DTYPES[dtype], device=device)
    harness.run(op, dtype, c, a, b, out)
    again = torch.empty_like(out)
    harness.run(op, dtype, c, a, b, again)
    torch.cuda.synchronize()
    repeatable = bool(torch.equal(out, again))
    a64, b64 = a.double(), b.double()
    expected = reference(c, a64, b64)
    got = out.double()
    error = (got - expected).abs()
    if dtype == "int32":
        return float(error.max()) if error.numel() else 0.0, bool((error == 0).all()), repeatable
    magnitude = reference(c, a64.abs(), b64.abs())
    out_eps, acc_eps = EPS[dtype]
    bound = 4 * ((out_eps + terms * acc_eps) * magnitude + SUBNORMAL[dtype])
    ok = bool((error <= bound).all())
    return (float(error.max()) if error.numel() else 0.0), ok, repeatable


def correctness(harness, cases, seed=0):
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    results, failures = [], 0
    for index in range(cases):
        config = random_config(rng)
        for op, dtypes in (
            (0, ["float32", "float64", "float16", "bfloat16", "int32"]),
            (1, ["float32", "float64", "float16", "bfloat16"]),
        ):
            dtype = dtypes[index % len(dtypes)]
            error, ok, repeatable = check_one(harness, op, dtype, config, generator)
            failures += not (ok and repeatable)
            results.append(
                {
                    "op": ["backprop_input", "backprop_filter"][op],
                    "dtype": dtype,
                    "config": config.describe(),
                    "max_error": error,
                    "ok": ok,
                    "repeatable": repeatable,
                }
            )
            if not (ok and repeatable):
                print(f"FAIL {results[-1]}")
    return results, failures


C = Config
# The CPU bench's layers at GPU batch sizes, plus the kinds the direct kernels
# find hardest: few channels, depthwise, NCHW.
BENCH = [
    ("DCGAN 8x8 256->128 N64", C(64, 16, 16, 128, 256, 5, 5, (2, 2), padding="SAME")),
    ("DCGAN 16x16 128->64 N64", C(64, 32, 32, 64, 128, 5, 5, (2, 2), padding="SAME")),
    ("DCGAN 32x32 64->3 N64", C(64, 64, 64, 3, 64, 5, 5, (2, 2), padding="SAME")),
    (
        "DCGAN 16x16 128->64 N64 NCHW",
        C(64, 32, 32, 64, 128, 5, 5, (2, 2), padding="SAME", data_format="NCHW"),
    ),
    ("U-Net 32x32 512->256 N16", C(16, 64, 64, 256, 512, 2, 2, (2, 2), padding="SAME")),
    ("stride1 56x56 64->64 N32", C(32, 56, 56, 64, 64, 3, 3, padding="SAME")),
    ("ENet 64x64 K3 s2 32->32 N16", C(16, 128, 128, 32, 32, 3, 3, (2, 2), padding="SAME")),
    (
        "depthwise 56x56 g64 K3 s2 N32",
        C(32, 112, 112, 64, 64, 3, 3, (2, 2), padding="SAME", groups=64),
    ),
]
OPS = ("backprop_input", "backprop_filter")


def _time(fn, repeats=7):
    """Median milliseconds of `fn` by CUDA events, after one untimed call
    (which also lets cuDNN pick its algorithm). Slow calls get fewer repeats."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def elapsed():
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    if elapsed() > 500:
        repeats = 3
    return statistics.median(elapsed() for _ in range(repeats))


def _torch_timings(op, config, a, b, dtype):
    """cuDNN through torch: {label: ms}; float32 both with TF32 allowed (the
    default of torch and of TensorFlow on this GPU) and without."""
    reference = torch_backprop_input if op == 0 else torch_backprop_filter
    modes = (
        {"cudnn_ms": True, "cudnn_fp32_strict_ms": False}
        if dtype == "float32"
        else {"cudnn_ms": True}
    )
    times = {}
    for label, tf32 in modes.items():
        torch.backends.cudnn.allow_tf32 = tf32
        times[label] = _time(functools.partial(reference, config, a, b))
    torch.backends.cudnn.allow_tf32 = True
    return times


def benchmark(harness, dtypes):
    """Both gradients of every BENCH layer: the direct kernels against cuDNN."""
    rows = []
    generator = torch.Generator().manual_seed(1)
    torch.backends.cudnn.benchmark = True
    for name, config in BENCH:
        for op in (0, 1):
            for dtype in dtypes:
                first_shape = config.filter_shape if op == 0 else config.input_shape
                out_shape = config.input_shape if op == 0 else config.filter_shape
                a = random_tensor(first_shape, dtype, generator, DEVICE)
                b = random_tensor(config.out_backprop_shape, dtype, generator, DEVICE)
                out = torch.empty(out_shape, dtype=TORCH_DTYPES[dtype], device=DEVICE)
                ours = _time(functools.partial(harness.run, op, dtype, config, a, b, out))
                row = {"shape": name, "op": OPS[op], "dtype": dtype, "ours_ms": ours}
                row.update(_torch_timings(op, config, a, b, dtype))
                row["ours_tflops"] = config.flops() / (ours * 1e-3) / 1e12
                row["speed_vs_cudnn"] = row["cudnn_ms"] / ours
                rows.append(row)
                strict = row.get("cudnn_fp32_strict_ms")
                print(
                    f"| {name} | {OPS[op]} | {dtype} | {ours:.3f} | {row['cudnn_ms']:.3f} | "
                    f"{'' if strict is None else f'{strict:.3f}'} | {row['ours_tflops']:.2f} | "
                    f"{row['speed_vs_cudnn']:.3f}x |",
                    flush=True,
                )
                del a, b, out
    for op in OPS:
        for dtype in dtypes:
            ratios = [r["speed_vs_cudnn"] for r in rows if r["op"] == op and r["dtype"] == dtype]
            geomean = float(np.exp(np.mean(np.log(ratios))))
            print(f"geomean speed vs cuDNN, {op} {dtype}: {geomean:.3f}x")
    return rows


def large_offsets(harness, columns=2**31 + 4099):
    """Both gradients where element offsets pass 2**31: one float16 row of
    2**31 + 4099 columns with a column stride of 4096, so that out_backprop is
    small while the taps reach past the 32-bit range. The input gradient is
    checked bitwise (each element is one product or zero); the filter
    gradient sums 524,290 products, of which only those past 2**31 - 2**15 are
    non-zero, so a wrong or truncated offset changes the sum."""
    stride = 4096
    config = Config(1, 1, columns, 1, 1, 1, 1, (1, stride))
    _, out_cols = config.out_size()
    generator = torch.Generator().manual_seed(5)
    dy = random_tensor(config.out_backprop_shape, "float16", generator, DEVICE)
    w = random_tensor(config.filter_shape, "float16", generator, DEVICE)
    result = {"config": config.describe(), "out_cols": out_cols}

    grad_input = torch.full(config.input_shape, 7, dtype=torch.float16, device=DEVICE)
    harness.run(0, "float16", config, w, dy, grad_input)
    torch.cuda.synchronize()
    # Every stride-th element is one rounded product, the others are zero;
    # the last tap's row of `stride` columns is cut short by the input's end.
    flat = grad_input.view(-1)
    whole = flat[: (out_cols - 1) * stride].view(out_cols - 1, stride)
    tail = flat[(out_cols - 1) * stride :]
    expected = (dy.view(-1).float() * w.view(-1).float()).half()
    zeros_ok = int(torch.count_nonzero(whole[:, 1:])) + int(torch.count_nonzero(tail[1:])) == 0
    result["input_ok"] = (
        bool(torch.equal(whole[:, 0], expected[:-1]))
        and bool(torch.equal(tail[:1], expected[-1:]))
        and zeros_ok
    )
    del grad_input, flat, whole, tail

    x = torch.zeros(config.input_shape, dtype=torch.float16, device=DEVICE)
    live = out_cols - 8  # the last 8 taps are past 2**31 - 2**15
    x.view(-1)[live * stride :: stride] = random_tensor([8], "float16", generator, DEVICE)
    grad_filter = torch.empty(config.filter_shape, dtype=torch.float16, device=DEVICE)
    harness.run(1, "float16", config, x, dy, grad_filter)
    torch.cuda.synchronize()
    products = x.view(-1)[::stride][:out_cols].double() * dy.view(-1).double()
    expected = float(products.sum())
    error = abs(float(grad_filter.view(-1)[0]) - expected)
    result["filter_error"] = error
    result["filter_ok"] = error <= 2.0**-9 * float(products.abs().sum()) + 1e-7
    print(f"large offsets: {result}")
    return result


def planted_overrun(harness):
    """Writes a 4,096-element input gradient into a 1,024-element buffer, so
    that a memory checker over the project's kernels must report it: proof
    that it sees them (run with PyTorch's caching allocator off, whose pooled
    blocks would hide the overrun)."""
    config = Config(1, 32, 32, 4, 4, 3, 3, padding="SAME")
    generator = torch.Generator().manual_seed(2)
    w = random_tensor(config.filter_shape, "float32", generator, DEVICE)
    dy = random_tensor(config.out_backprop_shape, "float32", generator, DEVICE)
    short = torch.empty(int(np.prod(config.input_shape)) // 4, device=DEVICE)
    harness.run(0, "float32", config, w, dy, short)
    torch.cuda.synchronize()


def selftest_references():
    """CPU: the torch formulations above against the NumPy definition."""
    rng = np.random.default_rng(3)
    checked = 0
    while checked < 60:
        c = random_config(rng)
        if c.batch * c.in_rows * c.in_cols * c.in_depth > 20000:
            continue
        checked += 1
        w, dy, x = (
            np.random.default_rng(1).standard_normal(s)
            for s in (c.filter_shape, c.out_backprop_shape, c.input_shape)
        )
        got = torch_backprop_input(c, torch.from_numpy(w), torch.from_numpy(dy)).numpy()
        np.testing.assert_allclose(
            got, testing.reference_conv2d_backprop_input(c, w, dy), atol=1e-9
        )
        got = torch_backprop_filter(c, torch.from_numpy(x), torch.from_numpy(dy)).numpy()
        np.testing.assert_allclose(
            got, testing.reference_conv2d_backprop_filter(c, x, dy), atol=1e-9
        )
    print(f"torch references agree with the NumPy definition on {checked} configurations")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--harness")
    parser.add_argument("--out", default=".")
    parser.add_argument("--cases", type=int, help="random configurations (120; 6 with --quick)")
    parser.add_argument("--quick", action="store_true", help="few small cases (sanitizer runs)")
    parser.add_argument("--no-bench", action="store_true")
    parser.add_argument("--selftest-references", action="store_true")
    parser.add_argument(
        "--planted-overrun", action="store_true", help="one out-of-bounds write (memcheck's check)"
    )
    args = parser.parse_args()
    if args.selftest_references:
        selftest_references()
        return 0
    harness = Harness(args.harness)
    if args.planted_overrun:
        planted_overrun(harness)
        return 0
    print(
        f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"cuDNN {torch.backends.cudnn.version()}"
    )
    cases = args.cases if args.cases is not None else 6 if args.quick else 120
    results, failures = correctness(harness, cases)
    by_dtype = {}
    for r in results:
        key = f"{r['op']}/{r['dtype']}"
        by_dtype[key] = max(by_dtype.get(key, 0.0), r["max_error"])
    for key, error in sorted(by_dtype.items()):
        print(f"max error {key}: {error:.3g}")
    large = {}
    if not args.quick:
        large = large_offsets(harness)
        failures += not (large["input_ok"] and large["filter_ok"])
    bench = []
    if not (args.quick or args.no_bench):
        print(
            "| layer | gradient | dtype | ours ms | cuDNN ms | cuDNN strict fp32 ms | "
            "ours TFLOP/s | cuDNN time / ours |"
        )
        print("|---|---|---|---|---|---|---|---|")
        bench = benchmark(harness, ["float32", "float16", "bfloat16"])
    os.makedirs(args.out, exist_ok=True)
    name = "results_quick.json" if args.quick else "results.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(
            {
                "correctness": results,
                "max_error_by_op_dtype": by_dtype,
                "failures": failures,
                "large_offsets": large,
                "benchmark": bench,
            },
            f,
            indent=1,
        )
    print(f"gpu check: {len(results) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
