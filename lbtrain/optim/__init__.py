"""lbtrain.optim: LEGW schedules, batch-size scaling rules and layer-wise optimizers for optax.

Importable on its own (it imports nothing else of lbtrain) and usable inside any optax chain::

    import optax
    from lbtrain import optim

    schedule = optim.legw_schedule(base_lr=0.1, base_batch_size=128, batch_size=2048,
                                   base_warmup_epochs=0.5, steps_per_epoch=29, num_epochs=90)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optim.lars(schedule, weight_decay=1e-4))
"""

from lbtrain.optim.factory import (
    FACTS,
    MASK_DEFAULTS,
    OPTIMIZERS,
    OptimPlan,
    applies_weight_decay,
    base_optimizer,
    current_lr,
    decay_arguments,
    has_trust_ratio,
    hyperparameters,
    make,
    make_schedule,
    plan,
    trust_ratios,
)
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
from lbtrain.optim.noise_scale import NoiseScaleAverager, noise_scale_terms, tree_sq_norm
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
    epochs_to_steps,
    legw_schedule,
    scaled_schedule,
    scheme_schedule,
    warmup_decay_schedule,
)

__all__ = [
    "DECAYS",
    "DECAY_DEFAULTS",
    "FACTS",
    "LR_RULES",
    "MASK_DEFAULTS",
    "OPTIMIZERS",
    "SCHEMES",
    "WARMUP_RULES",
    "NoiseScaleAverager",
    "OptimPlan",
    "ParamMask",
    "StaticMask",
    "TrustRatioState",
    "add_decayed_weights",
    "applies_weight_decay",
    "base_optimizer",
    "current_lr",
    "decay_arguments",
    "default_mask",
    "epochs_to_steps",
    "has_trust_ratio",
    "hyperparameters",
    "lamb",
    "lars",
    "legw_schedule",
    "make",
    "make_schedule",
    "map_params_with_path",
    "masked_paths",
    "noise_scale_terms",
    "param_mask",
    "path_str",
    "plan",
    "resolve_mask",
    "safe_norm",
    "scale_by_trust_ratio",
    "scale_lr",
    "scale_warmup_epochs",
    "scaled_schedule",
    "scheme_rules",
    "scheme_schedule",
    "static_mask",
    "tree_sq_norm",
    "trust_ratios",
    "warmup_decay_schedule",
]
