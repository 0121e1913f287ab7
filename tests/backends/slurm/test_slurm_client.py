"""The SLURM client's readings that need no cluster: a node's GPUs from its GRES (as ``sinfo %G``
prints them) and what a partition lacks for a job's shape."""

import pytest

from experiments.backends.slurm.cluster import Partition, gres_gpus
from experiments.backends.slurm.sbatch import shape


@pytest.mark.parametrize(
    "gres, gpus",
    [("gpu:4", 4), ("gpu:a100:4(S:0-1)", 4), ("gpu:2,mps:200", 2), ("(null)", 0), ("", 0)],
)
def test_a_nodes_gpus_from_its_gres(gres, gpus):
    assert gres_gpus(gres) == gpus


def test_what_a_partition_lacks_for_a_shape():
    gpus = Partition("gpu", None, (("a", 32, 4), ("b", 32, 4), ("c", 32, 2)))
    assert gpus.lacks(shape(8, 4)) == ""
    assert gpus.lacks(shape(12, 4)) == (
        "needs 12 GPUs, 3 node(s) of 4, and partition gpu has 2 such node(s)"
    )
    assert gpus.lacks(shape(8, 8)) == (
        "needs 8 GPUs, 1 node(s) of 8, and partition gpu has no such node (the most: 4 GPUs)"
    )
    cpus = Partition("debug", 3600, (("a", 2, 0), ("b", 2, 0)))
    assert cpus.lacks(shape(4, 0)) == ""
    assert cpus.lacks(shape(5, 0)) == "needs 5 processes and partition debug has 4 CPUs in all"
