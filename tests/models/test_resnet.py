"""ResNet v1.5: size of the real ResNet-50, which leaves LARS and weight decay touch, zero-init
blocks, the bf16 switch, and BatchNorm in train/eval mode."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lbtrain import config_lib, optim, optimizer
from lbtrain.errors import ConfigError
from lbtrain.models.resnet import Block, ResNet

ROOT_CONFIG = "configs/resnet50_imagenet.py"


def abstract_params(**kw):
    """The parameter tree of a ResNet without allocating it (shapes only)."""
    model = nnx.eval_shape(lambda: ResNet(rngs=nnx.Rngs(0), **kw))
    return nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[1])


def test_resnet50_v15_has_the_reference_parameter_count_and_layers():
    params = abstract_params(depth=50)
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    # torchvision / TF ResNet-50 v1.5
    assert sum(int(np.prod(x.shape)) for _, x in leaves) == 25_557_032
    kernels = [
        (optim.path_str(p), x.shape) for p, x in leaves if optim.path_str(p).endswith("kernel")
    ]
    convs = [k for k in kernels if len(k[1]) == 4]
    assert len(convs) == 1 + 16 * 3 + 4  # stem, 16 bottlenecks x 3, 4 projection shortcuts
    # v1.5: the stride-2 sits on the 3x3 convolution (middle) of the first block of stages 2-4
    model = nnx.eval_shape(lambda: ResNet(rngs=nnx.Rngs(0), depth=50))
    strided = [
        (i, j) for i, b in enumerate(model.blocks) for j, c in enumerate(b.convs) if c.strides == 2
    ]
    assert strided == [(3, 1), (7, 1), (13, 1)]


def test_lars_and_weight_decay_masks_on_the_resnet50_tree():
    cfg = config_lib.load_config(ROOT_CONFIG)
    params = abstract_params(depth=50)
    wd_mask = optim.param_mask(
        cfg.optim.mask.min_ndim, tuple(cfg.optim.mask.exclude_from_weight_decay)
    )(params)
    trust_mask = optim.param_mask(
        cfg.optim.mask.min_ndim, tuple(cfg.optim.mask.exclude_from_trust_ratio)
    )(params)
    for (path, _), wd, tr in zip(
        jax.tree_util.tree_flatten_with_path(params)[0],
        jax.tree.leaves(wd_mask),
        jax.tree.leaves(trust_mask),
    ):
        name = optim.path_str(path)
        is_weight = name.endswith("kernel")  # convolutions and the classifier
        assert wd == tr == is_weight, name
        if not is_weight:
            assert re.search(r"(norm[^/]*/\d*/?(scale|bias)|head/bias|norm/(scale|bias))", name), (
                name
            )
    counts = (sum(jax.tree.leaves(trust_mask)), len(jax.tree.leaves(trust_mask)))
    # 53 convs + 1 dense get LARS; 53 BN x (scale, bias) + 1 bias do not
    assert counts == (54, 54 + 53 * 2 + 1)


def test_lars_step_leaves_excluded_leaves_with_trust_ratio_one():
    cfg = config_lib.load_config(ROOT_CONFIG + ":runlocal=True")
    model = ResNet(rngs=nnx.Rngs(0), depth=18, width=4, stem="small", in_channels=1, num_classes=10)
    params = nnx.to_pure_dict(nnx.split(model, nnx.Param, ...)[1])
    tx, _ = optimizer.make(cfg.optim, batch_size=32, steps_per_epoch=10, num_epochs=2)
    state = tx.init(params)
    grads = jax.tree.map(lambda x: jnp.full_like(x, 0.01), params)
    _, state = jax.jit(tx.update)(grads, state, params)
    ratios = optimizer.trust_ratios(state)
    for (path, r), (_, p) in zip(
        jax.tree_util.tree_flatten_with_path(ratios)[0],
        jax.tree_util.tree_flatten_with_path(params)[0],
    ):
        name = optim.path_str(path)
        if name.endswith("kernel"):
            expected = (
                1e-3
                * np.linalg.norm(p)
                / (np.linalg.norm(np.full(p.shape, 0.01)) + 1e-4 * np.linalg.norm(p))
            )
            np.testing.assert_allclose(float(r), expected, rtol=1e-4, err_msg=name)
        else:
            assert float(r) == 1.0, name


def test_zero_init_last_bn_makes_each_block_start_as_identity():
    x = jax.random.normal(jax.random.key(0), (2, 4, 4, 8))
    block = Block(8, 8, 1, "basic", rngs=nnx.Rngs(0), dtype=None, zero_init_last_bn=True)
    np.testing.assert_allclose(block(x), jax.nn.relu(x), atol=1e-6)
    bottleneck = Block(8, 2, 1, "bottleneck", rngs=nnx.Rngs(0), dtype=None, zero_init_last_bn=True)
    np.testing.assert_allclose(bottleneck(x), jax.nn.relu(x), atol=1e-6)
    plain = Block(8, 8, 1, "basic", rngs=nnx.Rngs(0), dtype=None, zero_init_last_bn=False)
    assert float(jnp.abs(plain(x) - jax.nn.relu(x)).max()) > 1e-2


def test_bf16_compute_switch_keeps_float32_params_and_logits():
    x = jax.random.normal(jax.random.key(1), (4, 32, 32, 3))
    fp32 = ResNet(rngs=nnx.Rngs(0), depth=18, width=8, num_classes=10, zero_init_last_bn=False)
    bf16 = ResNet(
        rngs=nnx.Rngs(0),
        depth=18,
        width=8,
        num_classes=10,
        zero_init_last_bn=False,
        dtype=jnp.bfloat16,
    )
    fp32.eval(), bf16.eval()
    y32, y16 = fp32(x), bf16(x)
    assert y16.dtype == jnp.float32
    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(nnx.split(bf16, nnx.Param, ...)[1]))
    # the convolutions really run in bfloat16
    assert "bf16" in str(jax.make_jaxpr(lambda v: bf16(v))(x))
    np.testing.assert_allclose(y16, y32, atol=0.1 * float(jnp.abs(y32).max()))
    assert not np.allclose(y16, y32, atol=1e-6)


def test_batchnorm_uses_batch_statistics_in_training_and_running_averages_in_eval():
    model = ResNet(rngs=nnx.Rngs(0), depth=18, width=4, stem="small", in_channels=1, num_classes=10)
    x = 3.0 + 2.0 * jax.random.normal(jax.random.key(2), (16, 8, 8, 1))
    model.train()
    model(x)
    mean = model.stem_norm.mean[...]
    conv = model.stem(x)
    # momentum 0.9
    np.testing.assert_allclose(mean, 0.1 * jnp.mean(conv, axis=(0, 1, 2)), rtol=1e-4, atol=1e-6)
    model.eval()
    a, b = model(x[:4]), model(x[:8])[:4]
    np.testing.assert_allclose(a, b, atol=1e-5)  # eval: no dependence on batch-mates


@pytest.mark.parametrize("depth", [7])
def test_unknown_depth_is_a_clear_error(depth):
    with pytest.raises(ConfigError, match="unknown model.depth 7; valid choices: 18, 34, 50"):
        ResNet(rngs=nnx.Rngs(0), depth=depth)
