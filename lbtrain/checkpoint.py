"""Checkpoints with Orbax: the whole ``TrainState`` (params, optimizer state, step, model state with its
RNG counters, carried LSTM state) in ``<workdir>/checkpoints``, atomically committed by Orbax.

Since the data order is a pure function of (seed, step), the step is the only data position a
resumed run needs: it recomputes exactly the batches it would have seen.
"""

from __future__ import annotations

import os

import jax
import orbax.checkpoint as ocp


def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_saveable(tree):
    """Typed PRNG keys -> their raw uint32 data (Orbax stores plain arrays)."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _from_saved(saved, template):
    return jax.tree.map(lambda s, t: jax.random.wrap_key_data(s, impl=jax.random.key_impl(t)) if _is_key(t) else s,
                        saved, template)  # fmt: skip


class Checkpointer:
    """Saves every ``every_steps`` updates (and when forced), keeps the newest ``keep``."""

    def __init__(self, workdir: str, every_steps: int, keep: int = 2):
        self.directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
        options = ocp.CheckpointManagerOptions(
            save_interval_steps=max(int(every_steps), 1), max_to_keep=keep, create=True,
            enable_async_checkpointing=False,
        )  # fmt: skip
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state",))

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state, force: bool = False) -> bool:
        saved = self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(_to_saveable(state))),
                                  force=force)  # fmt: skip
        self.manager.wait_until_finished()
        return saved

    def restore(self, template, step: int | None = None):
        """The state saved at ``step`` (default: the latest), placed like ``template``'s arrays."""
        step = self.latest_step() if step is None else step
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), _to_saveable(template)
        )
        restored = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
        return _from_saved(restored["state"], template)

    def close(self) -> None:
        self.manager.close()
