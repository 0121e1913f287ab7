"""The Cloud TPU accelerator types this fake offers, written from Google's public pages and not from
the launcher's table (experiments/backends/tpu/accelerators.py), so that a test can hold one
against the other (tests/backends/tpu/test_fake_gcloud.py).

What a type ``GEN-N`` is, per generation:

* v2, v3, v4, v5p: N counts TensorCores, two a chip, and one host (a TPU VM, gcloud's worker) holds
  four chips, so N is a multiple of 8. Sources: a TPU board holds four chips of two cores each
  (https://cloud.google.com/tpu/docs/system-architecture-tpu-vm); v4-128 is 128 TensorCores
  (https://cloud.google.com/tpu/docs/types-topologies); the v5p shapes table, cores / chips /
  hosts: 2x2x1 8 / 4 / 1, 2x2x2 16 / 8 / 2, 4x4x4 128 / 64 / 16, 16x16x24 12288 / 6144 / 1536
  (https://cloud.google.com/tpu/docs/v5p). The largest: a v2 Pod of 256 chips, 512 TensorCores
  (https://cloud.google.com/tpu/docs/v2), a v3 Pod of 1024 chips
  (https://cloud.google.com/tpu/docs/v3), a v4 Pod of 4096 chips
  (https://cloud.google.com/tpu/docs/v4), a v5p slice of 6144 chips (the v5p page). JAX sees each
  TensorCore as a device on v2 / v3 and each chip as one device (megacore) on v4 / v5p.
* v5e (``v5litepod-N``) and v6e: N counts chips, one TensorCore and one device each (the v5e page
  spells the type v$VERSION_NUMBER-$CHIP_COUNT: https://cloud.google.com/tpu/docs/v5e), in the
  shapes their pages list: 1, 4, 8, 16, 32, 64, 128, 256 chips. The v6e table gives the VMs of
  each (https://cloud.google.com/tpu/docs/v6e): v6e-1, v6e-4 and v6e-8 one VM; 16 chips (4x4) 4
  VMs, 32 chips 8, 64 chips 16, 128 chips 32, 256 chips 64. The v5e page says a v5e TPU VM holds
  1, 4 or 8 chips and lists only the physical hosts (8 chips each); its larger slices are VMs of 4
  chips (machine type ct5lp-hightpu-4t), as v6e's are, and those VMs are what gcloud's
  ``--worker`` addresses.
"""

from __future__ import annotations

import dataclasses
import re

CHIPS_PER_HOST = 4  # v2-v5p: a host (TPU VM) of four chips
# generation: (devices JAX sees on a chip, the largest N: TensorCores of a Pod or largest slice)
TENSORCORE_GENERATIONS = {"v2": (2, 512), "v3": (2, 2048), "v4": (1, 8192), "v5p": (1, 12288)}
# chips of a slice -> its TPU VMs, as the v6e table lists them (and v5e's 4-chip VMs)
VMS_OF_CHIPS = {1: 1, 4: 1, 8: 1, 16: 4, 32: 8, 64: 16, 128: 32, 256: 64}
CHIP_GENERATIONS = ("v5litepod", "v6e")


@dataclasses.dataclass(frozen=True)
class Shape:
    """One accelerator type: ``chips`` chips on ``hosts`` TPU VMs, seen by JAX as ``devices``."""

    chips: int
    hosts: int
    devices: int


def shape(accelerator_type: str) -> Shape | None:
    """The shape of ``accelerator_type`` (``v4-32``), or ``None`` outside the rules: v2-v5p in
    whole 4-chip hosts up to the largest slice (which of those sizes Google's 3D topologies allow
    is not checked, here or in the launcher), v5e / v6e in the shapes their tables list."""
    match = re.fullmatch(r"([a-z0-9]+)-([0-9]+)", accelerator_type.strip().lower())
    if not match:
        return None
    generation, n = match.group(1), int(match.group(2))
    if generation in TENSORCORE_GENERATIONS:
        devices_per_chip, largest = TENSORCORE_GENERATIONS[generation]
        if n <= 0 or n > largest or n % (2 * CHIPS_PER_HOST):
            return None
        chips = n // 2
        return Shape(chips=chips, hosts=chips // CHIPS_PER_HOST, devices=chips * devices_per_chip)
    if generation in CHIP_GENERATIONS and n in VMS_OF_CHIPS:
        return Shape(chips=n, hosts=VMS_OF_CHIPS[n], devices=n)
    return None


def offered() -> list:
    """Every accelerator type this fake offers, smallest first within a generation."""
    types = [
        f"{generation}-{n}"
        for generation, (_, largest) in TENSORCORE_GENERATIONS.items()
        for n in range(2 * CHIPS_PER_HOST, largest + 1, 2 * CHIPS_PER_HOST)
    ]
    return types + [f"{g}-{n}" for g in CHIP_GENERATIONS for n in VMS_OF_CHIPS]
