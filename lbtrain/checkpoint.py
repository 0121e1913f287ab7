"""Checkpoints with Orbax: the whole ``TrainState`` (params, optimizer state, step, model state with
its RNG counters, carried LSTM state) in ``<workdir>/checkpoints`` (local or ``gs://``; Orbax writes
the arrays through tensorstore, every process its own shards into the one shared directory),
atomically committed by Orbax.

Since the data order is a pure function of (seed, step), the step is the only data position a
resumed run needs: it recomputes exactly the batches it would have seen.

Verified: Orbax restores an array whose stored bytes have flipped bits without a complaint (no
checksum on array data), so every checkpoint carries a digest of its arrays (item ``digest``, JSON),
computed on the devices from the global arrays (:func:`lbtrain.tree_checks.array_digest`: any single
flipped bit changes it).
:meth:`Checkpointer.restore` recomputes it on what it read; a checkpoint that does not match, or
that cannot be read at all (truncated, partly missing), is reported by step in a warning line and
the previous one is used.

Multi-host: every process reads and verifies each candidate step, and the processes agree on it
before any uses it (:func:`lbtrain.hosts.gather`): the restored step is the newest that *every*
process verified, so one host's transient read error cannot put the hosts on different steps. A read
failure inside the item handlers is returned as a value, not raised, so that the failing process
still joins Orbax's restore barrier and the digest computation with the others.

A state whose parameters are not all finite is never saved: :meth:`Checkpointer.save` raises
:class:`NonFiniteStateError` (a :class:`~lbtrain.errors.DivergedError`), so the newest checkpoint is
always a good one.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import sys
from collections.abc import Callable
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging as absl_logging
from etils import epath

from lbtrain import hosts, rundir
from lbtrain.errors import DivergedError, ResumeError, StorageError
from lbtrain.tree_checks import DIGEST_FORMAT, array_digest, first_non_finite


class NonFiniteStateError(DivergedError):
    """The state to checkpoint has NaN or infinite parameters: it is not saved."""


def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_saveable(tree):
    """Typed PRNG keys -> their raw uint32 data (Orbax stores plain arrays)."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _from_saved(saved, template):
    return jax.tree.map(
        lambda s, t: jax.random.wrap_key_data(s, impl=jax.random.key_impl(t)) if _is_key(t) else s,
        saved,
        template,
    )


# tensorstore reports an I/O failure as a ValueError starting with its absl status code
_STORE_CODES = (
    "RESOURCE_EXHAUSTED",
    "PERMISSION_DENIED",
    "UNAVAILABLE",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "UNAUTHENTICATED",
    "DATA_LOSS",
    "ABORTED",
    "INTERNAL",
)


def _store_failure(e: BaseException) -> str | None:
    """A short reason if ``e`` is a tensorstore I/O failure (else ``None``: a bug keeps its
    traceback)."""
    text = str(e)
    code = next((c for c in _STORE_CODES if text.startswith(c + ":")), None)
    if code is None:
        return None
    os_error = re.search(r"os_error_code='(\d+)'", text)
    if os_error:
        return rundir.describe_error(
            OSError(int(os_error.group(1)), os.strerror(int(os_error.group(1))))
        )
    if code == "RESOURCE_EXHAUSTED":
        return rundir.describe_error(OSError(errno.ENOSPC, "no space"))
    return code.lower().replace("_", " ")


def _storage_failure(e: BaseException) -> bool:
    """Whether :meth:`Checkpointer.save` turns ``e`` into its one-line :class:`StorageError`."""
    if isinstance(e, ValueError):
        return _store_failure(e) is not None
    return isinstance(e, rundir.failure_types())


class _ReraisedBySave(logging.Filter):
    """Orbax's save threads log each failure with its traceback (absl's logger, ERROR) before the
    save raises it again in the thread that called it: for a storage failure, which
    :meth:`Checkpointer.save` reports in one line, that is some 50 lines a thread for the same
    error. Those records are dropped; any other keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        from_orbax = f"{os.sep}orbax{os.sep}" in (record.pathname or "")
        return not (from_orbax and error is not None and _storage_failure(error))


absl_logging.get_absl_logger().addFilter(_ReraisedBySave())


class _Unreadable:
    """What a tolerant handler returns for an item it could not read: why."""

    def __init__(self, why: str):
        self.why = why


def _tolerant(handler_class, save_args, restore_args):
    """``handler_class`` whose ``restore`` returns an :class:`_Unreadable` instead of raising, and
    the save / restore argument types that select it (subclasses of Orbax's own, registered with it,
    so that Orbax's global choice of handler for its own argument types is left alone)."""

    class Tolerant(handler_class):
        def restore(self, directory, args=None):
            try:
                return super().restore(directory, args=args)
            except Exception as e:  # a damaged item fails in Orbax / tensorstore with many types
                return _Unreadable(rundir.describe_error(e))

    Tolerant.__name__ = Tolerant.__qualname__ = f"Tolerant{handler_class.__name__}"

    def registered(base, **which):
        return ocp.args.register_with_handler(Tolerant, **which)(
            type(f"Tolerant{base.__name__}", (base,), {})
        )

    return (
        Tolerant,
        registered(save_args, for_save=True),
        registered(restore_args, for_restore=True),
    )


_StateHandler, _StateSave, _StateRestore = _tolerant(
    ocp.StandardCheckpointHandler, ocp.args.StandardSave, ocp.args.StandardRestore
)
_DigestHandler, _DigestSave, _DigestRestore = _tolerant(
    ocp.JsonCheckpointHandler, ocp.args.JsonSave, ocp.args.JsonRestore
)


def _closed_loop_callback(args) -> bool:
    return args.exc_type is RuntimeError and str(args.exc_value) == "Event loop is closed"


def quiet_abandoned_writes() -> None:
    """Silence the late callbacks of a save that fails or is interrupted (idempotent; installed
    before every save, since those callbacks can run before the failure reaches the caller).

    Orbax awaits tensorstore writes inside an event loop that it closes as soon as one write
    fails. The writes still in flight finish afterwards on tensorstore's threads, and each one's
    done-callback then calls ``call_soon_threadsafe`` on the closed loop; tensorstore reports the
    resulting ``RuntimeError('Event loop is closed')`` through ``sys.unraisablehook``, one bare
    traceback per write, ahead of the run's own one-line error. Only that error is dropped; any
    other unraisable exception still reaches the previous hook."""
    previous = sys.unraisablehook
    if getattr(previous, "_drops_closed_loop_callbacks", False):
        return

    def hook(args):
        if not _closed_loop_callback(args):
            previous(args)

    hook._drops_closed_loop_callbacks = True
    sys.unraisablehook = hook


def _params(state):
    return getattr(state, "params", state)


class Checkpointer:
    """Saves every ``every_steps`` updates (and when forced), keeps the newest ``keep``; restores
    the newest checkpoint that verifies.

    ``workdir`` may be local or ``gs://``. In a multi-process run every process creates its
    Checkpointer on the same ``workdir`` and calls ``save`` / ``restore`` together (Orbax
    coordinates them)."""

    def __init__(
        self, workdir: str, every_steps: int, keep: int = 2, finite: Callable[[Any], Any] = _params
    ):
        self.directory = os.fspath(rundir.path(workdir) / "checkpoints")
        self._finite = finite
        options = ocp.CheckpointManagerOptions(
            save_interval_steps=max(int(every_steps), 1),
            max_to_keep=keep,
            create=True,
            # a failed or killed save's leftovers
            enable_async_checkpointing=False,
            cleanup_tmp_directories=True,
        )
        with rundir.storage_errors(self.directory, "open the checkpoint directory"):
            self.manager = ocp.CheckpointManager(
                self.directory,
                options=options,
                item_handlers={"state": _StateHandler(), "digest": _DigestHandler()},
            )
        self.restored_step: int | None = None
        self.damaged: dict[int, str] = {}  # step -> why, found by restore in this process

    def latest_step(self) -> int | None:
        """The newest checkpoint's step (it is verified only when restored: see
        ``restored_step``)."""
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        """The steps of the checkpoints on disk, oldest first (none verified yet)."""
        return sorted(self.manager.all_steps())

    def save(self, step: int, state, force: bool = False) -> bool:
        """Save ``state`` as step ``step`` if it is a save step (or ``force``); returns whether it
        saved.

        Raises :class:`NonFiniteStateError` (nothing written) if the parameters are not all
        finite."""
        if not force and not self.manager.should_save(step):
            return False
        bad = first_non_finite(self._finite(state))
        if bad is not None:
            latest = self.latest_step()
            raise NonFiniteStateError(
                f"the state at step {step} has non-finite values (first: params{bad}): not "
                "checkpointed; the last good checkpoint is "
                f"{'step ' + str(latest) if latest is not None else 'none'} in {self.directory}: "
                "lower optim.base_lr or set optim.clip_norm"
            )
        if step in self.damaged and step in self.manager.all_steps():
            # a damaged checkpoint found at restore gives way to the new one
            self.manager.delete(step)
        saveable = _to_saveable(state)
        digest = {"format": DIGEST_FORMAT, "leaves": array_digest(saveable)}
        try:
            items = ocp.args.Composite(state=_StateSave(saveable), digest=_DigestSave(digest))
            # before the save, not on its failure: the late callbacks may run on tensorstore's
            # threads while the failure is still on its way up this one
            quiet_abandoned_writes()
            saved = self.manager.save(step, args=items, force=force)
            self.manager.wait_until_finished()
        # a full disk comes as tensorstore's ValueError or, from Orbax's metadata writes, as the
        # OSError itself (which of them first depends on its threads): one line either way
        except (ValueError, *rundir.failure_types()) as e:
            why = _store_failure(e) if isinstance(e, ValueError) else rundir.describe_error(e)
            if why is None:
                raise
            latest = self.latest_step()
            kept = (
                f"the checkpoint at step {latest} is intact"
                if latest is not None
                else "no earlier checkpoint"
            )
            raise StorageError(
                f"cannot save the checkpoint at step {step} in {self.directory} ({why}): {kept}; "
                "free space or fix permissions, then run the same command again to resume"
            ) from e
        return saved

    def _restore_step(self, step: int, abstract, fallback):
        """(saved tree, None) or (None, why it is unusable). Every process runs the same collectives
        here whatever it finds (``fallback``, the template's arrays, stands in for a tree it could
        not read)."""
        has_digest = (epath.Path(self.directory) / str(step) / "digest").exists()
        args = {"state": _StateRestore(abstract)}
        if has_digest:
            args["digest"] = _DigestRestore()
        try:
            restored = self.manager.restore(step, args=ocp.args.Composite(**args))
        # damaged beyond what the item handlers see (step metadata, the folder itself)
        except Exception as e:
            return None, f"unreadable: {rundir.describe_error(e)}"
        state, expected = restored["state"], restored["digest"] if has_digest else None
        actual = array_digest(fallback if isinstance(state, _Unreadable) else state)
        if isinstance(state, _Unreadable):
            return None, f"unreadable: {state.why}"
        if isinstance(expected, _Unreadable):
            return None, f"its digest is unreadable: {expected.why}"
        if expected is None:
            rundir.warn(
                f"the checkpoint at step {step} in {self.directory} has no digest: restored "
                "unverified"
            )
            return state, None
        expected = expected.get("leaves", {})
        if set(expected) != set(actual):
            return None, "its digest lists other arrays than the checkpoint holds"
        wrong = [p for p in actual if actual[p] != expected[p]]
        if wrong:
            return (
                None,
                f"array data does not match its digest (first: {wrong[0]}; {len(wrong)} arrays)",
            )
        return state, None

    def restore(self, template, step: int | None = None):
        """The newest verified state at or before ``step`` (default: the latest), placed like
        ``template``'s arrays. Damaged checkpoints are skipped with a warning line each;
        ``restored_step`` tells which step was used. Raises :class:`ResumeError` if none verifies.
        In a multi-process run a step counts as verified only if every process verified it."""
        steps = [
            s for s in sorted(self.manager.all_steps(), reverse=True) if step is None or s <= step
        ]
        if not steps:
            raise ResumeError(
                f"no checkpoint{'' if step is None else f' at or before step {step}'} in "
                f"{self.directory}"
            )
        saveable = _to_saveable(template)
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), saveable
        )
        for i, s in enumerate(steps):
            saved, why = self._restore_step(s, abstract, saveable)
            verified = hosts.gather(int(saved is not None))
            if all(verified):
                self.restored_step = s
                return _from_saved(saved, template)
            if why is None:
                failed = [str(p) for p, ok in enumerate(verified) if not ok]
                why = (
                    f"process{'es' if len(failed) > 1 else ''} {', '.join(failed)} could not read"
                    " or verify it"
                )
            self.damaged[s] = why
            nxt = (
                f"trying step {steps[i + 1]}"
                if i + 1 < len(steps)
                else "no older checkpoint is left"
            )
            rundir.warn(f"the checkpoint at step {s} in {self.directory} is damaged ({why}): {nxt}")
        raise ResumeError(
            f"no usable checkpoint in {self.directory} (damaged: "
            + ", ".join(f"step {s}" for s in steps)
            + "): move that folder aside to start over, or restore it from a copy"
        )

    def close(self) -> None:
        """Release Orbax's checkpoint manager."""
        self.manager.close()
