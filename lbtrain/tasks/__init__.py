"""What "trained" means per application: loss as (sum, count, carry), eval metrics and the evaluation.

See :mod:`lbtrain.tasks.base` for the interface. ``TASKS`` maps a config's ``task`` name to its builder.
"""

from lbtrain.errors import ConfigError
from lbtrain.tasks.base import MetricEvaluator, SplitResult, Task
from lbtrain.tasks.classification import ClassificationTask
from lbtrain.tasks.language_model import LanguageModelTask
from lbtrain.tasks.translation import DecodingEvaluator, TranslationTask


def _translation(config):
    d = config.decode
    return TranslationTask(beam_size=d.beam_size, alpha=d.alpha, max_len=d.max_len)


# name -> builder(whole config): a task reads the config blocks it owns (translation: decode)
TASKS = {
    "classification": lambda config: ClassificationTask(),
    "language_model": lambda config: LanguageModelTask(),
    "translation": _translation,
}


def make(config):
    """The task ``config.task``, built from the config."""
    if config.task not in TASKS:
        raise ConfigError(f"unknown task {config.task!r}; valid choices: {', '.join(TASKS)}")
    return TASKS[config.task](config)


__all__ = ["ClassificationTask", "DecodingEvaluator", "LanguageModelTask", "MetricEvaluator", "SplitResult", "TASKS",
           "Task", "TranslationTask", "make"]  # fmt: skip
