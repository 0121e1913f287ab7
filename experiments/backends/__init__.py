"""The clients the executors drive, one per backend, side by side: ``tpu`` (the Cloud TPU
launcher, whose command line is ``scripts/tpu_launch.py``) and ``slurm`` (sbatch, the cluster's
queue, a job's handle and the program each job runs).

A client knows its backend and nothing of the sweep: it imports nothing of
:mod:`experiments.sweep`, :mod:`experiments.report` or the plans. The executors
(:mod:`experiments.sweep.executors`) import them, never the other way round.

This file and ``tpu/`` import the standard library alone: the TPU launcher runs on the machine one
launches from, with any Python >= 3.8 and no package installed.
"""
