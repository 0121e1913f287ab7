"""What "trained" means per application: loss as (sum, count, carry) and eval metrics.

A task has ``init_carry(model, batch_size)`` (state carried between batches, or None),
``loss(model, batch, carry) -> (sum, count, carry)``, ``eval_metrics(model, batch, carry) ->
(sums, carry)`` and ``summarize(sums) -> metrics``. A task that generates text also has
``translate(model, batch, **decode_cfg) -> ids``; the loop scores those with ``dataset.score``.
"""

from lbtrain.tasks.classification import ClassificationTask
from lbtrain.tasks.language_model import LanguageModelTask
from lbtrain.tasks.translation import TranslationTask

TASKS = {"classification": ClassificationTask, "language_model": LanguageModelTask, "translation": TranslationTask}


def make(name: str):
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid choices: {', '.join(TASKS)}")
    return TASKS[name]()


__all__ = ["ClassificationTask", "LanguageModelTask", "TASKS", "TranslationTask", "make"]
