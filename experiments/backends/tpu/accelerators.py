"""The Cloud TPU accelerator types the launcher knows: what a type string such as ``v4-32`` means in
chips, JAX devices and hosts (TPU VMs: gcloud's workers, one JAX process each), and the runtime
image its VMs boot. One table for the launcher and the sweep executor (the tests' fake gcloud writes
its own facts from Google's pages, and a test holds this table to them).

Sources (Cloud TPU docs, "TPU v5e" and "TPU v6e" pages, "Supported configurations"; the v2-v5p
system architecture pages; the "TPU software versions" page for the images):

* v2, v3, v4, v5p: the number after the dash counts TensorCores, two a chip, and a TPU VM holds 4
  chips (v4-8: 4 chips on 1 VM; v4-32: 16 chips on 4 VMs). JAX sees each TensorCore as a device on
  v2 / v3 (v3-8: 8 devices) and each chip as one device on v4 / v5p (megacore: v4-8: 4 devices).
* v5e (``v5litepod-N``) and v6e (``v6e-N``): the number counts chips, one TensorCore and one JAX
  device each. Slices of 1, 4 or 8 chips are one VM; larger ones are VMs of 4 chips (the v6e table
  lists v6e-16 as 4 VMs; the v5e page: "each TPU VM in a v5e slice contains 1, 4 or 8 chips", and
  v5litepod-16 is 4 VMs). The docs' "hosts" column counts physical 8-chip machines: 2 for a 16-chip
  slice; what gcloud addresses with --worker, and what this table counts, is VMs.
* The largest slices: a v2 Pod is 512 TensorCores, a v3 Pod 1,024 chips (2,048 TensorCores), a v4
  Pod 4,096 chips (8,192), the largest v5p slice 6,144 chips (12,288).
"""

from __future__ import annotations

import dataclasses
import re

from .common import LaunchError


@dataclasses.dataclass(frozen=True)
class Family:
    """A TPU generation as its accelerator types spell it (``v4``, ``v5litepod``)."""

    name: str
    chip: str  # the generation's usual name (v5e for v5litepod)
    counts: str  # what the number after the dash counts: "cores" or "chips"
    cores_per_chip: int
    devices_per_chip: int  # JAX devices a chip shows
    single_vm_chips: int  # slices of up to this many chips are one VM ...
    chips_per_vm: int  # ... larger ones are VMs of this many chips
    image: str  # the TPU VM runtime image for JAX
    sizes: tuple = ()  # the only sizes offered (empty: any whole number of VMs up to `largest`)
    largest: int = 0  # with sizes empty: the largest N offered (a whole Pod)


# Slices of v5e / v6e: the shapes their docs list; v2-v5p come in many 3D shapes of whole VMs.
SMALL_POD_SIZES = (1, 4, 8, 16, 32, 64, 128, 256)
# name, chip, what N counts, cores a chip, devices a chip, chips of a one-VM slice, chips a VM,
# image, sizes
FAMILIES = {
    f.name: f
    for f in (
        Family("v2", "v2", "cores", 2, 2, 4, 4, "tpu-ubuntu2204-base", largest=512),
        Family("v3", "v3", "cores", 2, 2, 4, 4, "tpu-ubuntu2204-base", largest=2048),
        Family("v4", "v4", "cores", 2, 1, 4, 4, "tpu-ubuntu2204-base", largest=8192),
        Family("v5p", "v5p", "cores", 2, 1, 4, 4, "v2-alpha-tpuv5", largest=12288),
        Family("v5litepod", "v5e", "chips", 1, 1, 8, 4, "v2-alpha-tpuv5-lite", SMALL_POD_SIZES),
        Family("v6e", "v6e", "chips", 1, 1, 8, 4, "v2-alpha-tpuv6e", SMALL_POD_SIZES),
    )
}


@dataclasses.dataclass(frozen=True)
class Accelerator:
    """One accelerator type: ``hosts`` TPU VMs (gcloud's workers, one JAX process each) holding
    ``chips`` chips that JAX sees as ``devices`` devices, booted from ``image``."""

    type: str
    family: str
    chips: int
    devices: int
    hosts: int
    image: str

    @property
    def chips_per_host(self) -> int:
        return self.chips // self.hosts

    @property
    def devices_per_host(self) -> int:
        return self.devices // self.hosts


def families_line() -> str:
    """The valid families in words, for error messages."""
    return (
        "the types are v2-N, v3-N, v4-N, v5p-N (N TensorCores, a multiple of 8, up to 512, "
        "2048, 8192 and 12288), "
        "v5litepod-N (v5e) and v6e-N (N chips: 1, 4, 8, 16, ..., 256)"
    )


def accelerator(accelerator_type: str) -> Accelerator:
    """The chips, devices, hosts and runtime image of ``accelerator_type`` (``v4-32``); raises
    :class:`LaunchError` (one line naming the type and the valid families) for a type Cloud TPU
    does not offer."""
    name = accelerator_type.strip().lower()
    match = re.match(r"^([a-z0-9]+)-([0-9]+)$", name)
    family = FAMILIES.get(match.group(1)) if match else None
    if family is None:
        raise LaunchError(f"unknown TPU accelerator type {accelerator_type!r}: {families_line()}")
    size = int(match.group(2))
    if family.counts == "cores":
        whole_vms = size % (family.cores_per_chip * family.chips_per_vm) == 0
        valid = 0 < size <= family.largest and whole_vms
        chips = size // family.cores_per_chip
    else:
        valid = size in family.sizes
        chips = size
    if not valid:
        raise LaunchError(
            f"{accelerator_type!r} is not a {family.chip} slice size Cloud TPU offers: "
            f"{families_line()}"
        )
    hosts = 1 if chips <= family.single_vm_chips else chips // family.chips_per_vm
    return Accelerator(
        type=name,
        family=family.name,
        chips=chips,
        devices=chips * family.devices_per_chip,
        hosts=hosts,
        image=family.image,
    )


def runtime_image(accelerator_type: str) -> str:
    """The TPU VM runtime image for ``accelerator_type`` (``v4-32`` -> ``tpu-ubuntu2204-base``)."""
    return accelerator(accelerator_type).image
