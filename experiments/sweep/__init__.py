"""Running a plan: the scheduler, written once (:mod:`~experiments.sweep.scheduler`: which run
starts where and when, the tuned column unfolding as runs finish, every record of the sweep), above
the executors that start the runs (:mod:`experiments.sweep.executors`: processes on this machine,
Cloud TPU slices, SLURM jobs). The sweep's state lives in ``<runs_dir>/sweep.json``
(:mod:`~experiments.sweep.state`); each run's outcome only in its workdir's files
(:mod:`experiments.runfiles`), so a page does not depend on what ran it.
"""
