"""Keras 3 layer backed by the plugin's op.

:class:`Conv2DTranspose` is ``keras.layers.Conv2DTranspose`` with its one
convolution call routed through :func:`tf_conv2d_transpose.conv2d_transpose`,
so it runs on CPU what TensorFlow's kernel refuses there (dilation in
float64/float16, channels_first, groups). Everything else — argument checks,
output shapes, bias, activation, weights and serialisation — is inherited from
Keras, so outputs match the stock layer wherever the stock layer runs.

Two additions over the stock layer: ``groups`` (grouped transposed
convolution), and ``strides > 1`` together with ``dilation_rate > 1``, which
the op supports but Keras refuses. The layer supports XLA
(``compile(jit_compile=True)`` and Keras' ``"auto"``).
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import keras
import tensorflow as tf

from tf_conv2d_transpose.nn import conv2d_transpose

IntOrPair = Union[int, Sequence[int]]

__all__ = ["Conv2DTranspose"]


def _pair(value: IntOrPair, name: str) -> Tuple[int, int]:
    """``value`` as two positive ints (one int is used for both); the stock
    layer's rule and message for a bad one."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        pair: Tuple[Any, ...] = (int(value),) * 2
    else:
        try:
            pair = tuple(value)  # type: ignore[arg-type]
        except TypeError:
            pair = ()
    message = f"The `{name}` argument must be a tuple of 2 integers. Received {name}={value}"
    if len(pair) != 2 or not all(isinstance(v, numbers.Integral) for v in pair):
        raise ValueError(message)
    bad = {v for v in pair if v <= 0}
    if bad:
        raise ValueError(f"{message}, including values {bad} that do not satisfy `value > 0`")
    return int(pair[0]), int(pair[1])


def _transposed_size(
    size: Union[int, tf.Tensor],
    kernel: int,
    stride: int,
    padding: str,
    output_padding: Optional[int],
    dilation: int,
) -> Union[int, tf.Tensor]:
    """Keras' output size of a transposed convolution along one axis (the
    stock layer's arithmetic; ``size`` may be a tensor)."""
    effective = (kernel - 1) * dilation + 1
    if padding == "valid":
        extra = max(effective, stride) - effective if output_padding is None else output_padding
        return (size - 1) * stride + effective + extra
    if output_padding is None:
        return size * stride
    return (size - 1) * stride + effective % 2 + output_padding


def _checked_groups(groups: Any, filters: Optional[int]) -> int:
    """``groups`` as an int after the constructor's checks (a positive integer
    dividing ``filters``)."""
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups <= 0:
        raise ValueError(
            f"The `groups` argument must be a positive integer. Received: groups={groups!r}"
        )
    # filters=None is accepted here as by the stock constructor (a layer meant
    # to be configured later); it cannot be built as it is.
    if filters is not None and filters % groups:
        raise ValueError(
            "The number of filters must be divisible by `groups`. Received: "
            f"filters={filters}, groups={groups}"
        )
    return int(groups)


def _output_shape(
    layer: keras.layers.Conv2DTranspose, inputs: tf.Tensor
) -> List[Union[int, tf.Tensor]]:
    """The layer's output shape for ``inputs``, as the stock TF backend computes
    it: static sizes where known, dynamic ones read from the tensor, then
    Keras' output-size arithmetic."""
    input_shape: List[Any] = list(inputs.shape)
    if None in input_shape:
        dynamic_shape = tf.shape(inputs)
        input_shape = [
            dynamic_shape[i] if size is None else size for i, size in enumerate(input_shape)
        ]
    channels_last = layer.data_format == "channels_last"
    spatial = input_shape[1:3] if channels_last else input_shape[2:4]
    output_padding = layer.output_padding or (None, None)
    sizes = [
        _transposed_size(size, kernel, stride, layer.padding.lower(), pad, dilation)
        for size, kernel, stride, pad, dilation in zip(
            spatial, layer.kernel_size, layer.strides, output_padding, layer.dilation_rate
        )
    ]
    if channels_last:
        return [input_shape[0], *sizes, layer.filters]
    return [input_shape[0], layer.filters, *sizes]


@keras.saving.register_keras_serializable(package="tf_conv2d_transpose")
class Conv2DTranspose(keras.layers.Conv2DTranspose):
    """2-D transposed convolution computed by the plugin's op.

    Takes the constructor arguments of ``keras.layers.Conv2DTranspose``, with
    the same defaults and meaning, plus ``groups``. It gives the same output
    shape and values as the stock layer (same weights) and can be swapped in
    for it, including in saved ``.keras`` files once this module is imported.

    Args:
      filters: number of output channels.
      kernel_size: int or pair: the window's height and width.
      strides: int or pair: the upsampling factor (the forward convolution's
        stride). Unlike the stock layer, may exceed 1 together with
        ``dilation_rate``.
      padding: ``"valid"`` or ``"same"`` (any case).
      output_padding: int, pair or ``None``: extra rows/columns added at the
        bottom/right of the output; each must be below the stride. ``None``
        lets the output size follow from the other arguments.
      data_format: ``"channels_last"`` or ``"channels_first"``; ``None`` takes
        Keras' configured image data format.
      dilation_rate: int or pair: spacing between the kernel's taps.
      activation: applied to the result; ``None`` for none.
      use_bias: whether to add a per-filter bias.
      kernel_initializer, bias_initializer: initializers of the weights.
      kernel_regularizer, bias_regularizer, activity_regularizer: optional
        regularizers.
      kernel_constraint, bias_constraint: optional constraints applied after
        each optimizer update.
      groups: split input channels and filters into this many independent
        groups (each group's filters see only its group's input channels). It
        must divide ``filters`` and the number of input channels. The kernel
        then has shape ``kernel_size + (filters // groups, input_channels)``.
      **kwargs: the base ``Layer`` arguments (``name``, ``dtype``,
        ``trainable``, ...).

    Raises:
      ValueError: invalid arguments, as the stock layer raises them, and a
        ``groups`` that is not a positive divisor of ``filters`` (here) or of
        the input channels (when the layer is built).
    """

    def __init__(
        self,
        filters: Optional[int],
        kernel_size: IntOrPair,
        strides: IntOrPair = (1, 1),
        padding: str = "valid",
        output_padding: Optional[IntOrPair] = None,
        data_format: Optional[str] = None,
        dilation_rate: IntOrPair = (1, 1),
        activation: Any = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
        groups: int = 1,
        **kwargs: Any,
    ) -> None:
        # Keras refuses strides > 1 with dilation_rate > 1 in its constructor;
        # the op supports the pair, so the dilation is set after that check.
        super().__init__(
            filters=filters,
            kernel_size=kernel_size,
            strides=strides,
            padding=padding,
            output_padding=output_padding,
            data_format=data_format,
            dilation_rate=1,
            activation=activation,
            use_bias=use_bias,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **kwargs,
        )
        self.dilation_rate = _pair(dilation_rate, "dilation_rate")
        self.groups = _checked_groups(groups, filters)
        # Both of the plugin's ops and their gradients have XLA lowerings, so
        # Keras may compile the layer: jit_compile=True, and "auto" on machines
        # with a GPU (README, "XLA").
        self.supports_jit = True

    def build(self, input_shape: Sequence[Optional[int]]) -> None:
        """Creates the kernel ``kernel_size + (filters // groups, in_channels)``
        and the bias, as the stock layer does for ``groups=1``."""
        channel_axis = -1 if self.data_format == "channels_last" else 1
        input_channels = input_shape[channel_axis]
        if input_channels is None:
            raise ValueError(
                "The channel dimension of the inputs must be known to build "
                f"{type(self).__name__}. Received input_shape={tuple(input_shape)}"
            )
        if input_channels % self.groups:
            raise ValueError(
                "The number of input channels must be divisible by `groups`. Received: "
                f"input channels={input_channels} (input_shape={tuple(input_shape)}), "
                f"groups={self.groups}"
            )
        self.input_spec = keras.InputSpec(
            min_ndim=self.rank + 2, axes={channel_axis: input_channels}
        )
        self.kernel = self.add_weight(
            name="kernel",
            shape=self.kernel_size + (self.filters // self.groups, input_channels),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
            trainable=True,
            dtype=self.dtype,
        )
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias",
                shape=(self.filters,),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
                trainable=True,
                dtype=self.dtype,
            )
        else:
            self.bias = None

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        """``activation(conv2d_transpose(inputs, kernel) + bias)``, by the op."""
        outputs = conv2d_transpose(
            inputs,
            tf.convert_to_tensor(self.kernel),
            _output_shape(self, inputs),
            strides=list(self.strides),
            padding=self.padding.upper(),
            data_format="NHWC" if self.data_format == "channels_last" else "NCHW",
            dilations=list(self.dilation_rate),
        )
        if self.use_bias:
            if self.data_format == "channels_last":
                bias_shape: Tuple[int, ...] = (1,) * (self.rank + 1) + (self.filters,)
            else:
                bias_shape = (1, self.filters) + (1,) * self.rank
            outputs = keras.ops.add(outputs, keras.ops.reshape(self.bias, bias_shape))
        if self.activation is not None:
            return self.activation(outputs)
        return outputs

    def get_config(self) -> Dict[str, Any]:
        """The stock layer's config plus ``groups``."""
        config = super().get_config()
        config["groups"] = self.groups
        return config
