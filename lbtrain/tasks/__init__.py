"""What "trained" means per application: loss (sum, count) and eval metrics."""

from lbtrain.tasks.classification import ClassificationTask

TASKS = {"classification": ClassificationTask}


def make(name: str):
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid choices: {', '.join(TASKS)}")
    return TASKS[name]()


__all__ = ["ClassificationTask", "TASKS", "make"]
