"""ResNet v1.5 (He et al. 2016, with the stride-2 on the 3x3 convolution of the bottleneck) in Flax
NNX.

``depth`` 18/34 use basic blocks, 50/101/152 bottlenecks. ``stem="imagenet"`` is the 7x7/2
convolution and 3x3/2 max-pool for 224x224 inputs; ``stem="small"`` a 3x3/1 convolution without
pooling, for tiny images (8x8 digits, CIFAR). ``width`` scales every stage's channels (64 at full
size).

BatchNorm statistics are taken over the whole batch the step sees: under ``jax.jit`` with the batch
sharded along ``'data'`` that is the *global* batch (XLA inserts the cross-device reduction), so 8
devices compute exactly what 1 device does. (With ``accum_steps > 1`` each micro-batch is normalised
by its own statistics, like a smaller global batch.) Running averages live in ``nnx.BatchStat``
variables (the train state's ``model_state``). ``zero_init_last_bn`` starts each block's last BN
scale at 0, so every residual block begins as the identity (Goyal et al. 2017). ``dtype`` is the
compute dtype (bfloat16 on accelerators), ``param_dtype`` the parameters' (float32 by default); BN
statistics and the logits stay float32. ``input_norm`` (from the dataset's ``model_args``) is the
per-channel (mean, std) the model applies to raw uint8 images inside the jitted step, in float32,
before the cast to the compute dtype: the host sends a quarter of the bytes.

Parameter names decide the LARS / weight-decay masks (:mod:`lbtrain.optim.masks`): convolution and
dense ``kernel`` leaves have ndim >= 2 and get both; BN ``scale``/``bias`` and the dense ``bias``
have ndim 1 and get neither, as in the paper's recipe.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from flax import nnx

from lbtrain.models.dtypes import resolve
from lbtrain.registry import choose

STAGES = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}
STEMS = {"imagenet": "7x7/2 convolution + 3x3/2 max-pool", "small": "3x3/1 convolution, no pooling"}
# He init, as in the reference
_conv_init = nnx.initializers.variance_scaling(2.0, "fan_out", "normal")


def _bn(features, rngs, dtype, param_dtype, zero_scale=False):
    scale_init = nnx.initializers.zeros if zero_scale else nnx.initializers.ones
    return nnx.BatchNorm(
        features,
        momentum=0.9,
        epsilon=1e-5,
        dtype=dtype,
        param_dtype=param_dtype,
        rngs=rngs,
        scale_init=scale_init,
    )


def normalize_input(images: jax.Array, input_norm: tuple | None) -> jax.Array:
    """``(images - mean) / std`` per channel in float32 for ``input_norm = (mean, std)``; the images
    unchanged for None."""
    if input_norm is None:
        return images
    mean, std = (jnp.asarray(v, jnp.float32) for v in input_norm)
    return (images.astype(jnp.float32) - mean) / std


class Block(nnx.Module):
    """A residual block: basic (two 3x3) or bottleneck (1x1, 3x3 with the stride, 1x1 to 4x
    channels)."""

    def __init__(
        self,
        in_ch: int,
        ch: int,
        stride: int,
        kind: str,
        *,
        rngs,
        dtype,
        param_dtype=jnp.float32,
        zero_init_last_bn: bool,
    ):
        conv = partial(
            nnx.Conv,
            use_bias=False,
            kernel_init=_conv_init,
            dtype=dtype,
            param_dtype=param_dtype,
            rngs=rngs,
        )
        self.kind = kind
        out_ch = ch * 4 if kind == "bottleneck" else ch
        if kind == "bottleneck":
            self.convs = nnx.List(
                [
                    conv(in_ch, ch, (1, 1)),
                    conv(ch, ch, (3, 3), strides=stride),
                    conv(ch, out_ch, (1, 1)),
                ]
            )
        else:
            self.convs = nnx.List(
                [conv(in_ch, ch, (3, 3), strides=stride), conv(ch, out_ch, (3, 3))]
            )
        n = len(self.convs)
        last = [zero_init_last_bn and i == n - 1 for i in range(n)]
        self.norms = nnx.List(
            [_bn(c.out_features, rngs, dtype, param_dtype, z) for c, z in zip(self.convs, last)]
        )
        self.projection = stride != 1 or in_ch != out_ch
        if self.projection:  # a 1x1 convolution (with the stride) where the shape changes
            self.shortcut = conv(in_ch, out_ch, (1, 1), strides=stride)
            self.shortcut_norm = _bn(out_ch, rngs, dtype, param_dtype)

    def __call__(self, x):
        y = x
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            y = norm(conv(y))
            if i < len(self.convs) - 1:
                y = jax.nn.relu(y)
        if self.projection:
            x = self.shortcut_norm(self.shortcut(x))
        return jax.nn.relu(y + x)


class ResNet(nnx.Module):
    def __init__(
        self,
        *,
        rngs: nnx.Rngs,
        depth: int = 50,
        num_classes: int = 1000,
        width: int = 64,
        stem: str = "imagenet",
        in_channels: int = 3,
        zero_init_last_bn: bool = True,
        label_smoothing: float = 0.0,
        dtype=None,
        param_dtype=jnp.float32,
        input_norm: tuple | None = None,
    ):
        dtype = resolve(dtype, "model.dtype")
        # (mean, std) per channel, from the dataset (model_args): the host sends uint8 and the
        # step normalises on the device; plain floats, so they live in the graph, not the state
        self.input_norm = (
            None
            if input_norm is None
            else tuple(tuple(float(v) for v in part) for part in input_norm)
        )
        param_dtype = resolve(param_dtype, "model.param_dtype")
        kind, counts = choose(STAGES, depth, "model.depth")
        choose(STEMS, stem, "model.stem")
        self.stem_kind, self.dtype, self.label_smoothing = stem, dtype, label_smoothing
        k = (7, 7) if stem == "imagenet" else (3, 3)
        self.stem = nnx.Conv(
            in_channels,
            width,
            k,
            strides=2 if stem == "imagenet" else 1,
            use_bias=False,
            kernel_init=_conv_init,
            dtype=dtype,
            param_dtype=param_dtype,
            rngs=rngs,
        )
        self.stem_norm = _bn(width, rngs, dtype, param_dtype)
        blocks, in_ch = [], width
        for stage, count in enumerate(counts):
            ch = width * 2**stage
            for i in range(count):
                stride = 2 if stage > 0 and i == 0 else 1
                block = Block(
                    in_ch,
                    ch,
                    stride,
                    kind,
                    rngs=rngs,
                    dtype=dtype,
                    param_dtype=param_dtype,
                    zero_init_last_bn=zero_init_last_bn,
                )
                blocks.append(block)
                in_ch = ch * 4 if kind == "bottleneck" else ch
        self.blocks = nnx.List(blocks)
        self.head = nnx.Linear(
            in_ch,
            num_classes,
            kernel_init=nnx.initializers.normal(0.01),
            dtype=dtype,
            param_dtype=param_dtype,
            rngs=rngs,
        )

    def __call__(self, images: jax.Array) -> jax.Array:
        """``images`` (B, H, W, C) -> logits (B, num_classes) float32. With ``input_norm`` the
        images are raw (uint8) and normalised here in float32 before the cast to the compute dtype;
        without, they arrive normalised."""
        x = normalize_input(images, self.input_norm).astype(self.dtype or jnp.float32)
        x = jax.nn.relu(self.stem_norm(self.stem(x)))
        if self.stem_kind == "imagenet":
            x = nnx.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for block in self.blocks:
            x = block(x)
        x = jnp.mean(x, axis=(1, 2))
        return self.head(x).astype(jnp.float32)
