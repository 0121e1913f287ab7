"""The SLURM client of the ``slurm`` executor (:mod:`experiments.sweep.executors.slurm`):

    sbatch.py   sbatch's rules (the options the executor sets, how sbatch reads a prefix or a
                short option), a job's shape, name and comment, its batch script and command line
    cluster.py  asking the cluster: whether it answers, a partition's MaxTime and nodes, the
                sweep's jobs in one ``squeue`` read, a job's exit status, submitting a job
    job.py      the handle of one job: its end and exit status, what SLURM did to it, a stop
    entry.py    what runs inside each job: the program each batch script ``exec``s

Importing this package imports nothing (``entry`` installs its signal handlers first thing).
"""


class SlurmError(Exception):
    """What SLURM cannot do as asked, in one line (the executor passes it on as its own error)."""
