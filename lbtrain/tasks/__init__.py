"""What "trained" means per application: loss as (sum, count, carry), eval metrics and the
evaluation.

See :mod:`lbtrain.tasks.base` for the interface. ``TASKS`` maps a config's ``task`` name to a
constructor whose keyword parameters are the top-level config keys it reads (``loss_reduction``, the
block ``decode``); :func:`make` passes exactly those, so a task-owned key set for a task that does
not read it is refused.
"""

from lbtrain import registry
from lbtrain.tasks.base import MetricEvaluator, SplitResult, Task
from lbtrain.tasks.classification import ClassificationTask
from lbtrain.tasks.language_model import LanguageModelTask
from lbtrain.tasks.translation import DecodingEvaluator, TranslationTask

# name -> constructor(**the top-level config keys it reads)
TASKS = {
    "classification": ClassificationTask,
    "language_model": LanguageModelTask,
    "translation": TranslationTask,
}


def task_keys() -> list[str]:
    """The top-level config keys some task reads: a config sets only those its own task reads."""
    return sorted(
        {key for constructor in TASKS.values() for key in registry.config_keys(constructor)}
    )


def make(config) -> Task:
    """The task ``config.task``, built from the task-owned top-level keys of ``config``."""
    block = {"task": config.task, **{k: config[k] for k in task_keys() if k in config}}
    return registry.make(TASKS, block, key="task")


__all__ = [
    "TASKS",
    "ClassificationTask",
    "CountsTokens",
    "DecodingEvaluator",
    "LanguageModelTask",
    "MetricEvaluator",
    "SplitResult",
    "Task",
    "TranslationTask",
    "make",
    "task_keys",
]
