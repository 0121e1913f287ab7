"""Dtypes by name, as a config gives them (``model.dtype="bfloat16"``), for the models."""

from __future__ import annotations

import jax.numpy as jnp

from lbtrain.registry import choose

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def resolve(dtype, where: str):
    """``dtype`` as a JAX dtype: a name from :data:`DTYPES` (``""`` or None: None, the layer's own
    choice) or a dtype, passed through. ``where`` (``model.dtype``) names the key in the error."""
    if dtype is None or dtype == "":
        return None
    if isinstance(dtype, str):
        return choose(DTYPES, dtype, where)
    return dtype
