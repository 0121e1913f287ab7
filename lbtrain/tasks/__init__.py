"""What "trained" means per application: loss as (sum, count, carry) and eval metrics.

A task has ``init_carry(model, batch_size)`` (state carried between batches, or None),
``loss(model, batch, carry) -> (sum, count, carry)``, ``eval_metrics(model, batch, carry) ->
(sums, carry)`` and ``summarize(sums) -> metrics``.
"""

from lbtrain.tasks.classification import ClassificationTask
from lbtrain.tasks.language_model import LanguageModelTask

TASKS = {"classification": ClassificationTask, "language_model": LanguageModelTask}


def make(name: str):
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid choices: {', '.join(TASKS)}")
    return TASKS[name]()


__all__ = ["ClassificationTask", "LanguageModelTask", "TASKS", "make"]
