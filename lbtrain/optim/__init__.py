"""lbtrain.optim: LEGW schedules, batch-size scaling rules, masks and LARS / LAMB for optax.

The optax library of lbtrain, and all that installing lbtrain brings (``pip install .`` from a
checkout, or its wheel): it imports jax, optax and numpy and nothing else of lbtrain, and every
name in ``__all__`` has its entry in the API reference (docs/api.md). The engine's config glue
lives apart, in :mod:`lbtrain.optimizer`.

Example:
    >>> import optax
    >>> from lbtrain import optim
    >>> schedule = optim.legw_schedule(base_lr=0.1, base_batch_size=128, batch_size=2048,
    ...                                base_warmup_epochs=0.5, steps_per_epoch=29, num_epochs=90)
    >>> tx = optax.chain(optax.clip_by_global_norm(1.0), optim.lars(schedule, weight_decay=1e-4))
    >>> round(float(schedule(optim.epochs_to_steps(8, 29))), 4)  # the peak 0.1 * 4, after 8 epochs
    0.4
"""

from lbtrain.optim.layerwise import (
    TrustRatioState,
    add_decayed_weights,
    lamb,
    lars,
    safe_norm,
    scale_by_trust_ratio,
)
from lbtrain.optim.masks import (
    ParamMask,
    StaticMask,
    default_mask,
    map_params_with_path,
    masked_paths,
    param_mask,
    path_str,
    resolve_mask,
    static_mask,
)
from lbtrain.optim.scaling import (
    LR_RULES,
    SCHEMES,
    WARMUP_RULES,
    scale_lr,
    scale_warmup_epochs,
    scheme_rules,
)
from lbtrain.optim.schedules import (
    DECAY_DEFAULTS,
    DECAYS,
    DecayShift,
    decay_shift,
    epochs_to_steps,
    legw_schedule,
    scaled_schedule,
    scheme_schedule,
    warmup_decay_schedule,
)

__all__ = [
    # schedules
    "legw_schedule",
    "scheme_schedule",
    "scaled_schedule",
    "warmup_decay_schedule",
    "epochs_to_steps",
    "decay_shift",
    "DecayShift",
    "DECAYS",
    "DECAY_DEFAULTS",
    # scaling rules
    "scale_lr",
    "scale_warmup_epochs",
    "scheme_rules",
    "SCHEMES",
    "LR_RULES",
    "WARMUP_RULES",
    # optimizers and transforms
    "lars",
    "lamb",
    "scale_by_trust_ratio",
    "add_decayed_weights",
    "TrustRatioState",
    "safe_norm",
    # masks
    "param_mask",
    "default_mask",
    "static_mask",
    "ParamMask",
    "StaticMask",
    "resolve_mask",
    "masked_paths",
    "path_str",
    "map_params_with_path",
]
