"""A pool of Cloud TPU slices as an executor of ``scripts/reproduce.py`` (``--executor=tpu``):
:class:`~tpupool.executor.TpuExecutor` drives ``scripts/tpu_launch.sh`` through its command line,
one run per slice at a time. It lives beside the launcher (``tpulaunch``, whose accelerator table
it reads) and imports the scheduler's interface from ``experiments.sweep``."""

from tpupool.executor import TpuExecutor, TpuPoolError

__all__ = ["TpuExecutor", "TpuPoolError"]
