"""The clients the executors drive, one per backend, side by side: ``tpu`` (the Cloud TPU
launcher, whose command line is ``scripts/tpu_launch.py``) and ``slurm`` (sbatch, the cluster's
queue, a job's handle and the program each job runs); ``workdir`` (the files of a run's workdir
that every backend's job writes or reads: its log, its result).

A client knows its backend and nothing of the sweep: it imports nothing of the experiments
(:mod:`experiments.sweep`, :mod:`experiments.report`, the plans, :mod:`experiments.runfiles`) but
the package's face, ``experiments.ROOT``; below it, :mod:`lbtrain` where it needs it. The executors
(:mod:`experiments.sweep.executors`) import the clients, never the other way round: a client's
error is its own (``LaunchError``, ``SlurmError``), which its executor passes on as
``ExecutorError``.

This file and ``tpu/`` import the standard library alone: the TPU launcher runs on the machine one
launches from, with any Python >= 3.8 and no package installed.
"""
