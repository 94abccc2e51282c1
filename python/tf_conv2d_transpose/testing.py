"""A slow, obviously-correct NumPy reference and problem helpers.

Used by the tests, the ``validate`` command and benchmarks as an oracle that
shares no code with the C++ kernel: the transposed convolution is written as
the scatter it is by definition, one filter tap at a time, in float64.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

import numpy as np


def _divide_toward_zero(numerator: int, denominator: int) -> int:
    # C++ integer division, as TensorFlow computes window sizes.
    quotient = abs(numerator) // denominator
    return quotient if numerator >= 0 else -quotient


def forward_output_size(
    size: int, filter_size: int, stride: int, dilation: int, padding: str, pads: Tuple[int, int]
) -> Tuple[int, int, int]:
    """Output size and (before, after) padding of a forward convolution along
    one dimension, by TensorFlow's rules. ``pads`` is used for EXPLICIT only."""
    effective = (filter_size - 1) * dilation + 1
    if padding == "VALID":
        return _divide_toward_zero(size - effective + stride, stride), 0, 0
    if padding == "EXPLICIT":
        numerator = size + pads[0] + pads[1] - effective + stride
        return _divide_toward_zero(numerator, stride), pads[0], pads[1]
    out = (size + stride - 1) // stride
    needed = max(0, (out - 1) * stride + effective - size)
    return out, needed // 2, needed - needed // 2


@dataclasses.dataclass(frozen=True)
class Conv2DTransposeConfig:
    """One transposed convolution, described by its forward convolution."""

    batch: int
    in_rows: int
    in_cols: int
    in_depth: int  # channels of the result (the forward input)
    out_depth: int  # channels of the transposed convolution's input
    filter_rows: int
    filter_cols: int
    stride: Tuple[int, int] = (1, 1)
    dilation: Tuple[int, int] = (1, 1)
    padding: str = "VALID"  # SAME, VALID or EXPLICIT
    explicit: Tuple[int, int, int, int] = (0, 0, 0, 0)  # top, bottom, left, right
    groups: int = 1
    data_format: str = "NHWC"

    @property
    def nchw(self) -> bool:
        return self.data_format == "NCHW"

    def out_size(self) -> Tuple[int, int]:
        """Spatial size of out_backprop (the transposed convolution's input)."""
        rows = forward_output_size(
            self.in_rows,
            self.filter_rows,
            self.stride[0],
            self.dilation[0],
            self.padding,
            self.explicit[:2],
        )[0]
        cols = forward_output_size(
            self.in_cols,
            self.filter_cols,
            self.stride[1],
            self.dilation[1],
            self.padding,
            self.explicit[2:],
        )[0]
        return rows, cols

    def _order(self, n: int, h: int, w: int, c: int) -> List[int]:
        return [n, c, h, w] if self.nchw else [n, h, w, c]

    @property
    def input_shape(self) -> List[int]:
        return self._order(self.batch, self.in_rows, self.in_cols, self.in_depth)

    @property
    def out_backprop_shape(self) -> List[int]:
        rows, cols = self.out_size()
        return self._order(self.batch, rows, cols, self.out_depth)

    @property
    def filter_shape(self) -> List[int]:
        return [self.filter_rows, self.filter_cols, self.in_depth // self.groups, self.out_depth]

    def op_attrs(self) -> Dict[str, object]:
        """Attributes for ``Conv2DBackpropInput`` (raw-op form)."""

        def four(pair: Tuple[int, int]) -> List[int]:
            return [1, 1, *pair] if self.nchw else [1, *pair, 1]

        explicit: List[int] = []
        if self.padding == "EXPLICIT":
            t, b, left, r = self.explicit
            pairs = (
                [[0, 0], [0, 0], [t, b], [left, r]]
                if self.nchw
                else [[0, 0], [t, b], [left, r], [0, 0]]
            )
            explicit = [p for pair in pairs for p in pair]
        return {
            "strides": four(self.stride),
            "dilations": four(self.dilation),
            "padding": self.padding,
            "explicit_paddings": explicit,
            "data_format": self.data_format,
        }

    def flops(self) -> float:
        rows, cols = self.out_size()
        return (
            2.0
            * self.batch
            * rows
            * cols
            * self.out_depth
            * self.filter_rows
            * self.filter_cols
            * (self.in_depth // self.groups)
        )

    def inside_flops(self) -> float:
        """The FLOPs of the products a kernel has to make: :meth:`flops` less
        those where a tap reads the forward convolution's padding (a zero
        there adds nothing)."""
        pairs = []
        for size, taps, stride, dilation, pads in (
            (self.in_rows, self.filter_rows, self.stride[0], self.dilation[0], self.explicit[:2]),
            (self.in_cols, self.filter_cols, self.stride[1], self.dilation[1], self.explicit[2:]),
        ):
            out, before, _ = forward_output_size(size, taps, stride, dilation, self.padding, pads)
            # (output position, tap) pairs along this dimension that land inside.
            pairs.append(
                sum(
                    1
                    for o in range(max(out, 0))
                    for k in range(taps)
                    if 0 <= o * stride - before + k * dilation < size
                )
            )
        return (
            2.0 * self.batch * pairs[0] * pairs[1] * self.out_depth * (self.in_depth // self.groups)
        )

    def describe(self) -> str:
        rows, cols = self.out_size()
        parts = [
            f"N{self.batch} {rows}x{cols}x{self.out_depth}->{self.in_rows}x{self.in_cols}"
            f"x{self.in_depth}",
            f"K{self.filter_rows}x{self.filter_cols}",
            f"s{self.stride[0]},{self.stride[1]}",
        ]
        if self.dilation != (1, 1):
            parts.append(f"d{self.dilation[0]},{self.dilation[1]}")
        if self.groups != 1:
            parts.append(f"g{self.groups}")
        parts.append(self.padding if self.padding != "EXPLICIT" else f"pad{list(self.explicit)}")
        parts.append(self.data_format)
        return " ".join(parts)


def _padded_frame(config: Conv2DTransposeConfig) -> Tuple[int, int, int, int]:
    """(top, left, rows, cols) of the forward convolution's padded input: big
    enough for every tap of every out_backprop pixel."""
    c = config
    rows, cols = c.out_size()
    _, top, _ = forward_output_size(
        c.in_rows, c.filter_rows, c.stride[0], c.dilation[0], c.padding, c.explicit[:2]
    )
    _, left, _ = forward_output_size(
        c.in_cols, c.filter_cols, c.stride[1], c.dilation[1], c.padding, c.explicit[2:]
    )
    padded_rows = top + c.in_rows
    padded_cols = left + c.in_cols
    if rows > 0 and cols > 0:
        padded_rows = max(
            padded_rows, (rows - 1) * c.stride[0] + (c.filter_rows - 1) * c.dilation[0] + 1
        )
        padded_cols = max(
            padded_cols, (cols - 1) * c.stride[1] + (c.filter_cols - 1) * c.dilation[1] + 1
        )
    return top, left, padded_rows, padded_cols


def _tap_windows(config: Conv2DTransposeConfig):
    """For each filter tap and group: the slices of the padded input that the
    tap reads for all out_backprop pixels, and the channel ranges."""
    c = config
    rows, cols = c.out_size()
    cg, cog = c.in_depth // c.groups, c.out_depth // c.groups
    if rows <= 0 or cols <= 0:
        return
    for kh in range(c.filter_rows):
        r0 = kh * c.dilation[0]
        for kw in range(c.filter_cols):
            c0 = kw * c.dilation[1]
            window = (
                slice(None),
                slice(r0, r0 + (rows - 1) * c.stride[0] + 1, c.stride[0]),
                slice(c0, c0 + (cols - 1) * c.stride[1] + 1, c.stride[1]),
            )
            for g in range(c.groups):
                yield kh, kw, window, slice(g * cg, (g + 1) * cg), slice(g * cog, (g + 1) * cog)


def _to_nhwc(config: Conv2DTransposeConfig, array: np.ndarray) -> np.ndarray:
    return array.transpose(0, 2, 3, 1) if config.nchw else array


def reference_conv2d_backprop_input(
    config: Conv2DTransposeConfig,
    filters: np.ndarray,
    out_backprop: np.ndarray,
    accumulate_dtype: Optional[np.dtype] = np.float64,
) -> np.ndarray:
    """Conv2DBackpropInput by definition: every out_backprop pixel, times each
    filter tap, is added into the input pixel that tap read in the forward
    convolution. Returns float64 (or ``accumulate_dtype``) in data_format."""
    c = config
    dy = _to_nhwc(c, np.asarray(out_backprop, dtype=accumulate_dtype))
    w = np.asarray(filters, dtype=accumulate_dtype)
    top, left, padded_rows, padded_cols = _padded_frame(c)
    padded = np.zeros((c.batch, padded_rows, padded_cols, c.in_depth), dtype=accumulate_dtype)
    for kh, kw, window, in_channels, out_channels in _tap_windows(c):
        padded[(*window, in_channels)] += dy[..., out_channels] @ w[kh, kw, :, out_channels].T
    result = padded[:, top : top + c.in_rows, left : left + c.in_cols, :]
    return result.transpose(0, 3, 1, 2) if c.nchw else result


def reference_conv2d_backprop_filter(
    config: Conv2DTransposeConfig,
    x: np.ndarray,
    out_backprop: np.ndarray,
    accumulate_dtype: Optional[np.dtype] = np.float64,
) -> np.ndarray:
    """Conv2DBackpropFilter by definition: for every tap, the sum over batch
    and out_backprop pixels of (input pixel the tap read) x (out_backprop
    pixel). Returns [rows, cols, in_depth / groups, out_depth] in float64."""
    c = config
    dy = _to_nhwc(c, np.asarray(out_backprop, dtype=accumulate_dtype))
    top, left, padded_rows, padded_cols = _padded_frame(c)
    padded = np.zeros((c.batch, padded_rows, padded_cols, c.in_depth), dtype=accumulate_dtype)
    padded[:, top : top + c.in_rows, left : left + c.in_cols, :] = _to_nhwc(
        c, np.asarray(x, dtype=accumulate_dtype)
    )
    result = np.zeros(c.filter_shape, dtype=accumulate_dtype)
    for kh, kw, window, in_channels, out_channels in _tap_windows(c):
        read = padded[(*window, in_channels)]
        result[kh, kw, :, out_channels] = np.einsum("nhwi,nhwo->io", read, dy[..., out_channels])
    return result


def reference_conv2d(
    config: Conv2DTransposeConfig,
    x: np.ndarray,
    filters: np.ndarray,
    accumulate_dtype: Optional[np.dtype] = np.float64,
) -> np.ndarray:
    """The forward Conv2D of ``config``'s input (the transposed convolution's
    result) with its filter, out_backprop-shaped, every tap's product formed
    with the zero-padded input (so, as in TensorFlow's Eigen Conv2D, an
    infinite filter value meeting the padding gives NaN; an empty input or
    filter forms no products: zeros, as TensorFlow). Returns float64 (or
    ``accumulate_dtype``) in data_format."""
    c = config
    w = np.asarray(filters, dtype=accumulate_dtype)
    x = np.asarray(x, dtype=accumulate_dtype)
    top, left, padded_rows, padded_cols = _padded_frame(c)
    padded = np.zeros((c.batch, padded_rows, padded_cols, c.in_depth), dtype=accumulate_dtype)
    padded[:, top : top + c.in_rows, left : left + c.in_cols, :] = _to_nhwc(c, x)
    rows, cols = c.out_size()
    result = np.zeros((c.batch, max(rows, 0), max(cols, 0), c.out_depth), dtype=accumulate_dtype)
    if x.size == 0 or w.size == 0:
        return result.transpose(0, 3, 1, 2) if c.nchw else result
    for kh, kw, window, in_channels, out_channels in _tap_windows(c):
        result[..., out_channels] += padded[(*window, in_channels)] @ w[kh, kw, :, out_channels]
    return result.transpose(0, 3, 1, 2) if c.nchw else result
