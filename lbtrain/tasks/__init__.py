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
    return TranslationTask(beam_size=d.beam_size, alpha=d.alpha, max_len=d.max_len, reduction=config.loss_reduction)


# name -> builder(whole config): a task reads the config keys it owns (language_model: loss_reduction;
# translation: loss_reduction, decode)
TASKS = {
    "classification": lambda config: ClassificationTask(),
    "language_model": lambda config: LanguageModelTask(reduction=config.loss_reduction),
    "translation": _translation,
}
# the tasks that read config.loss_reduction ("token" | "sequence"); any other task refuses the key
REDUCING_TASKS = ("language_model", "translation")


def make(config):
    """The task ``config.task``, built from the config."""
    if config.task not in TASKS:
        raise ConfigError(f"unknown task {config.task!r}; valid choices: {', '.join(TASKS)}")
    return TASKS[config.task](config)


__all__ = ["REDUCING_TASKS", "TASKS", "ClassificationTask", "DecodingEvaluator", "LanguageModelTask", "MetricEvaluator",
           "SplitResult", "Task", "TranslationTask", "make"]  # fmt: skip
