"""Running a plan: the scheduler, written once (:mod:`~experiments.sweep.scheduler`: which run
starts where and when, the tuned column unfolding as runs finish), above the executors that start
the runs (:mod:`~experiments.sweep.local`: processes on this machine, on its CPU or GPUs). The
sweep's state lives in ``<runs_dir>/sweep.json`` (:mod:`~experiments.sweep.state`); each run's
outcome only in its workdir's files (:mod:`experiments.runfiles`), so a page does not depend on
what ran it.
"""
