"""Independent float64 references for the optim tests, written from the papers and TF sources.

Nothing here imports lbtrain: every function restates a published rule in plain NumPy / Python.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def tf_lars_step(w, v, g, lr, *, momentum, wd, eta, eps, nesterov, adapt):
    """One step of TensorFlow's ``LARSOptimizer`` (tensorflow/tpu ``lars_optimizer.py``) on one
    variable.

    ``adapt``: the variable is not in the skip list (it gets weight decay and the trust ratio).
    Returns ``(new_w, new_v, trust_ratio)``.
    """
    if adapt:
        w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
        ratio = eta * w_norm / (g_norm + wd * w_norm + eps) if (w_norm > 0 and g_norm > 0) else 1.0
        scaled_lr, grad = lr * ratio, g + wd * w
    else:
        ratio, scaled_lr, grad = 1.0, lr, g
    new_v = momentum * v + scaled_lr * grad
    update = momentum * new_v + scaled_lr * grad if nesterov else new_v
    return w - update, new_v, ratio


def lamb_step(w, m, v, g, t, lr, *, b1, b2, eps, wd, decay, trust):
    """One step of LAMB (You et al. 2020, Algorithm 2, phi = identity) with bias correction; ``t``
    >= 1.

    ``decay`` / ``trust``: the variable gets weight decay / the layer-wise ratio.
    Returns ``(new_w, new_m, new_v, ratio)``.
    """
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
    r = m_hat / (np.sqrt(v_hat) + eps)
    u = r + wd * w if decay else r
    w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(u)
    ratio = w_norm / u_norm if (trust and w_norm > 0 and u_norm > 0) else 1.0
    return w - lr * ratio * u, m, v, ratio


def _dec(x) -> Fraction:
    """A number as the decimal it prints as: the tests give these references short decimals (7.5,
    12.8, 1.35), which the library reads the same way; its reading of a float ``N / B`` is checked
    by integer arithmetic in test_exact_numbers.py."""
    return Fraction(x) if isinstance(x, int | Fraction) else Fraction(repr(float(x)))


def first_update_at(epoch, steps_per_epoch) -> int:
    """The smallest update count ``s >= 0`` with ``s / steps_per_epoch >= epoch`` (exact
    rationals)."""
    e, spe = _dec(epoch), _dec(steps_per_epoch)
    s = max(int(e * spe) - 2, 0)
    while Fraction(s) / spe < e:
        s += 1
    return s


def schedule_value(s, *, peak, warmup_epochs, num_epochs, steps_per_epoch, decay, **kw) -> float:
    """The documented semantics of :mod:`lbtrain.optim.schedules`, step by step in float64."""
    spe = _dec(steps_per_epoch)
    warm = first_update_at(warmup_epochs, spe)
    total = first_update_at(num_epochs, spe)
    s = min(s, total)
    if s < warm:
        return peak * s / warm

    def reached(epoch):
        b = first_update_at(epoch, spe)
        return s >= (max(b, warm + 1) if warm > 0 else b)

    if decay == "constant":
        return peak
    if decay == "poly":
        end, power = kw.get("end_value", 0.0), kw.get("power", 1.0)
        return end + (peak - end) * (1 - (s - warm) / (total - warm)) ** power
    if decay == "cosine":
        end = kw.get("end_value", 0.0)
        return end + (peak - end) * (1 + math.cos(math.pi * (s - warm) / (total - warm))) / 2
    if decay == "multistep":
        n = sum(reached(b) for b in kw.get("boundaries", ()))
        return peak * kw.get("factor", 0.1) ** n
    assert decay == "exponential"
    rate, start = kw.get("rate", 0.5), kw.get("start_epoch")
    e0 = max(_dec(warmup_epochs), _dec(warmup_epochs if start is None else start))
    if kw.get("staircase", False):
        n, m = 0, 1
        while reached(e0 + m):
            n, m = n + 1, m + 1
        return peak * rate**n
    s0 = first_update_at(e0, spe)
    return peak * rate ** (max(0, s - s0) / float(spe))
