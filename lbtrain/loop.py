"""The training loop alone: resume, iterate, log, evaluate, checkpoint, preemption, NaN policy.

``train(run, workdir)`` takes a built :class:`lbtrain.setup.Run` and knows nothing of any task: it
asks ``run.evaluate`` for metrics and writes what it gets. Since the data order is a pure function
of (seed, step), the step in a checkpoint is all a resumed run needs to see exactly the batches it
would have seen.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import jax
import jax.numpy as jnp

from lbtrain import config_lib, hosts, parallel, provenance, rundir
from lbtrain.checkpoint import Checkpointer
from lbtrain.errors import DivergedError, ResumeError
from lbtrain.health import check_finite, nan_record
from lbtrain.metrics import MetricWriter
from lbtrain.preemption import PreemptionWatch
from lbtrain.progress import Progress, format_duration


def _check_resumable(config, workdir: str) -> None:
    saved = rundir.read_json(rundir.path(workdir) / "config.json")
    if saved is None or config.resume_policy == "allow_changes":
        return
    conflicts = config_lib.resume_conflicts(
        saved, json.loads(json.dumps(config.to_dict(), default=str))
    )
    if conflicts:
        raise ResumeError(
            f"{workdir} holds a checkpoint of a run with another config ({'; '.join(conflicts)}): "
            "use a new --workdir, or --config.resume_policy=allow_changes to resume with the new "
            "values"
        )


@dataclasses.dataclass
class _Logged:
    """A logged step whose numbers are still on the device. The loop reads them after it has
    dispatched the next step, so the device computes while the host waits for them, logs and judges
    them."""

    step: int
    metrics: Any
    record: Any  # a copy of nan_record(state): the state itself is donated to the next step
    clip: Any = None  # the clip figures summed since the previous row (runs with a clip)


_copy = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree))
# the per-update figures a row sums over the updates since the previous row (runs with a clip)
CLIP_KEYS = ("clipped", "effective_lr")


@jax.jit
def _add_clip(total, metrics):
    """``total`` (updates, clipped, summed effective LR) with one more update's figures."""
    return total + jnp.stack([jnp.float32(1.0), metrics["clipped"], metrics["effective_lr"]])


def clip_row(total) -> dict[str, float]:
    """A row's clip figures from its ``total``: the fraction of its updates that were clipped, the
    mean effective LR over them, and how many updates they cover (``log_every``, or fewer in the
    first row after a resume between two rows)."""
    n, clipped, lr_sum = (float(x) for x in jax.device_get(total))
    return {"clip_fraction": clipped / n, "effective_lr_mean": lr_sum / n, "clip_updates": n}


def _as_is(batch):
    return batch


class _Session:
    """One process's pass over a run: the state, the writers, the timers and the eval history."""

    def __init__(self, run, workdir: str, lock):
        self.run, self.workdir, self.plan, self.lock = run, workdir, run.plan, lock
        self.config, self.writer_enabled = run.config, parallel.is_writer()
        self.checkpoints = Checkpointer(
            workdir, self.plan.checkpoint_every, run.config.keep_checkpoints
        )
        self.state, self.resume_step = run.state, None
        self.history, self.train_time = [], 0.0
        # the wall time of the processes before this one, up to the checkpoint resumed (read in
        # resume()): a run's wall time, like its training time, spans every kill and resume
        self.t_start, self.wall_before = time.perf_counter(), 0.0

    def wall_time(self) -> float:
        """The run's wall-clock seconds so far: the earlier processes' up to the checkpoint this
        one resumed, then this process's since it started."""
        return self.wall_before + (time.perf_counter() - self.t_start)

    def resume(self) -> None:
        """Restore the newest verified checkpoint (a damaged one falls back to the one before), then
        open the metric writers from that step: rows logged after it are dropped and logged
        again."""
        if self.checkpoints.latest_step() is not None:
            _check_resumable(self.config, self.workdir)
            self.state = self.checkpoints.restore(self.state)
            self.resume_step = self.checkpoints.restored_step
        config_path = rundir.path(self.workdir) / "config.json"
        # the config, and beside it what the run derived that the config does not show
        shift = self.plan.optim.decay_shift
        derived = {"decay_shift": dataclasses.asdict(shift) if shift is not None else None}
        record = {**self.config.to_dict(), config_lib.DERIVED_KEY: derived}
        rundir.write_json(config_path, record, is_writer=self.writer_enabled)
        if self.writer_enabled:
            print(self.plan.describe(), flush=True)
            if self.run.data.summary() is not None:
                print(self.run.data.summary(), flush=True)
            if self.resume_step is not None:
                print(
                    f"resuming from the checkpoint at step {self.resume_step} in "
                    f"{self.checkpoints.directory}",
                    flush=True,
                )
        self.writer = MetricWriter(
            self.workdir, enabled=self.writer_enabled, resume_step=self.resume_step
        )
        # the training and wall time before the checkpoint (from its last logged rows): both span
        # every process; a row from before rows carried wall time gives its training time instead
        kept = self.writer.rows()
        self.train_time = max((r.get("train_time_s", 0.0) for r in kept), default=0.0)
        self.wall_before = max(
            (r.get("wall_time_s", r.get("train_time_s", 0.0)) for r in kept), default=0.0
        )
        self.progress = Progress(
            self.plan.total_steps,
            self.plan.steps_per_epoch,
            self.plan.items_per_step,
            enabled=self.writer_enabled,
            unit=self.plan.unit,
        )

    def check_workdir(self) -> None:
        """Stop every process, in one line, once this run no longer holds its workdir (deleted,
        its lock deleted, or taken over by another run): before anything more is written there,
        which would recreate a deleted folder without its config and history or write into
        another run's. Only process 0 holds the lock: its finding is shared first."""
        problem = self.lock.problem()
        if hosts.any_process(problem is not None):
            self.writer.discard()  # a last flush would recreate the folder with this file alone
            hosts.raise_from_process_zero(problem)

    def evaluate(self, step: int, again: bool = False) -> None:
        """Evaluate and log; ``again``: a finished run re-reports its final metrics (rows already
        logged stay)."""
        self.check_workdir()
        self.progress.pause()
        results = self.run.evaluate(self.state.params, self.state.model_state)
        for split, res in results.items():
            ev = {
                **res.metrics,
                "epoch": step / self.plan.steps_per_epoch,
                "train_time_s": self.train_time,
                "wall_time_s": self.wall_time(),
            }
            if not (again and self.writer.has(step, split)):
                self.writer.write(step, split, ev)
            self.history.append({"step": step, "split": split, **ev})
            if self.writer_enabled:
                shown = " | ".join(
                    f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in ev.items()
                    if k not in ("epoch", "step")
                )
                print(f"{split} @ step {step} (epoch {ev['epoch']:.2f}): {shown}", flush=True)
                for line in res.samples:
                    print(line, flush=True)

    def log(self, logged: _Logged, t_seg: float) -> None:
        """Judge a logged step's updates (a bad one stops the run here) and write its row;
        ``train_time_s`` is the training time when its numbers were read (at most one update after
        the step ended)."""
        check_finite(logged.record, self.state.params, self.config.nan_policy, self.checkpoints)
        step = logged.step
        m = {
            k: float(v)
            for k, v in jax.device_get(logged.metrics).items()
            if k not in CLIP_KEYS  # one update's: the row has their sums (clip_row)
        }
        if logged.clip is not None:
            m.update(clip_row(logged.clip))
        m[f"{self.plan.unit}_per_sec"] = self.progress.update(
            step, m["loss"], m["lr"], m.get("loss_per_token")
        )
        m["epoch"] = step / self.plan.steps_per_epoch
        m["train_time_s"] = self.train_time + (time.perf_counter() - t_seg)
        m["wall_time_s"] = self.wall_time()
        self.writer.write(step, "train", m)

    def save(self, step: int) -> None:
        """Metrics first, then the checkpoint: a kill between the two replays rows, never loses
        them."""
        # never commit a state after a bad update
        check_finite(
            nan_record(self.state), self.state.params, self.config.nan_policy, self.checkpoints
        )
        self.check_workdir()
        self.writer.flush()
        self.checkpoints.save(step, self.state, force=True)
        # another run took the workdir over (a stale lock): every process stops here, nothing lost.
        # Only process 0 holds the lock, so its finding is shared before anyone acts on it.
        if hosts.any_process(self.lock.lost):
            raise rundir.taken_over(self.workdir)

    def close(self) -> None:
        self.progress.close()
        self.writer.close()
        self.checkpoints.close()


def _iterate(s: _Session, preemption: PreemptionWatch) -> bool:
    """Train from the state's step to the end; returns False when a stop request (a preemption,
    Ctrl-C) stopped it (saved).

    The host waits for the device between unlogged steps only to stay at most
    ``parallel.DISPATCH_AHEAD`` steps ahead of it. A logged step's numbers (its metrics
    and a copy of the bad-update record) are read after the next step has been dispatched, so the
    device is busy while the host reads, judges and writes them; a bad update still ends the run one
    update later, naming the first bad step, and is never checkpointed (the save judges the state
    itself first). An evaluated, checkpointed, preempted or last step is read at once."""
    plan, run = s.plan, s.run
    step, total = int(s.state.step), plan.total_steps
    first = step
    s.progress.start(step)
    t_seg = time.perf_counter()
    data_iter = run.batches.iterate(step)
    # one process: the jitted step places the NumPy batch itself, along its in_shardings (in C++),
    # where assembling global arrays in Python took half the loop's host time on a small model
    feed = run.global_batch if jax.process_count() > 1 else _as_is
    pending = None
    window = parallel.DispatchWindow()  # the metrics of the steps not yet waited for
    clip = None  # the clip figures since the last row, summed on the device (runs with a clip)
    while step < total:
        s.state, metrics = run.train_step(s.state, feed(next(data_iter)))
        window.push(metrics)
        if CLIP_KEYS[0] in metrics:
            clip = _add_clip(jnp.zeros(3, jnp.float32) if clip is None else clip, metrics)
        step += 1
        if step == first + 1:  # this step compiled the train step: rates and the ETA start after it
            jax.block_until_ready(s.state)
            s.progress.compiled(step)
        if pending is not None:  # the previous step's numbers, read while this one computes
            s.log(pending, t_seg)
            pending = None
        logged = step % plan.log_every == 0 or step == total
        if logged:
            pending = _Logged(step, metrics, _copy(nan_record(s.state)), clip)
            clip = None
        evaluated = step % plan.eval_every == 0 or step == total
        due = step % plan.checkpoint_every == 0 or step == total
        preempted = preemption.requested(step, due or logged or evaluated)
        # a step's rows (train, then eval) are written before its checkpoint: save() flushes them
        # first, so a run killed at any point and resumed from that checkpoint has every row up to
        # its step
        if pending is not None and (evaluated or due or preempted):
            s.log(pending, t_seg)
            pending = None
        if evaluated:
            jax.block_until_ready(s.state)
            s.train_time += time.perf_counter() - t_seg
            s.evaluate(step)  # pauses the progress clock: an evaluation is not training
            t_seg = time.perf_counter()
        if preempted or due:
            jax.block_until_ready(s.state)  # the step's time is training, the save's is not
            s.progress.pause(clear=False)
            s.save(step)
        if evaluated or preempted or due:
            s.progress.resume()
        if preempted and step < total:  # asked at the last step: the run has finished anyway
            return False
    return True


def train(run, workdir: str, lock=None) -> dict[str, Any]:
    """Train ``run`` in ``workdir`` (local or ``gs://``); returns the final eval metrics, the plan,
    timings and the final state.

    Writes ``config.json``, ``metrics.jsonl``, TensorBoard events (``tb/``), ``checkpoints/`` and
    ``results.json``, holding the workdir lock (``lock``, or one taken here) throughout. A workdir
    that holds a checkpoint is resumed from it (same config required unless
    ``resume_policy=allow_changes``).
    """
    if lock is None:
        rundir.check_writable(workdir)
        with hosts.workdir_lock(workdir) as lock:
            return train(run, workdir, lock)
    # SIGTERM and SIGINT are caught from the restore to the last file written: once training has
    # ended, a late one only lets the closing writes finish (results.json, provenance.json) instead
    # of killing them midway
    with PreemptionWatch() as preemption:
        s = _Session(run, workdir, lock)
        try:
            s.resume()
            try:
                with jax.set_mesh(run.mesh):
                    finished = _iterate(s, preemption)
                    if finished and (not s.history or s.history[-1]["step"] != s.plan.total_steps):
                        # resumed a finished run: its final metrics
                        s.evaluate(s.plan.total_steps, again=True)
            finally:
                s.close()
        except DivergedError as e:  # from the restore (a non-finite checkpoint) or training
            _record_failure(s, e)
            raise
        step, total = int(s.state.step), s.plan.total_steps
        if not finished:
            if s.writer_enabled:
                stopped = "interrupted" if preemption.interrupted else "preempted"
                print(
                    f"{stopped} at step {step}/{total}: checkpoint saved in "
                    f"{s.checkpoints.directory}; run the same command again to resume",
                    flush=True,
                )
            return {
                "preempted": True,
                "interrupted": preemption.interrupted,
                "step": step,
                "plan": dataclasses.asdict(s.plan.optim),
                "state": s.state,
            }
        return _finish(s)


FAILURE_EXIT = 1  # what `lbtrain` exits with on an error found once the run started (lbtrain.main)


def _record_failure(s: _Session, e: DivergedError) -> None:
    """``failure.json`` in the workdir (process 0): a diverged run is a result of the run, recorded
    with the error line ``lbtrain`` prints, its exit status and the first bad step (else the step
    the state had reached).
    Any other error (a held lock, missing data, storage) writes nothing: running the command again
    is the remedy there."""
    record = {
        "error": "lbtrain: error: " + (" ".join(str(e).split()) or type(e).__name__),
        "exit": FAILURE_EXIT,
        "step": e.step if e.step is not None else int(s.state.step),
    }
    rundir.write_json(rundir.path(s.workdir) / "failure.json", record, is_writer=s.writer_enabled)


def _finish(s: _Session) -> dict[str, Any]:
    s.check_workdir()  # results.json must not land in a folder recreated since the last check
    total, splits = s.plan.total_steps, s.run.data.eval_splits
    # the whole run's evaluations, across every kill and resume (this process saw only its own part)
    history = [
        {**r, "split": r["kind"]} for r in s.writer.rows() if r["kind"] in splits
    ] or s.history
    last = {h["split"]: h for h in history if h["step"] == total}
    result = {
        "final": last.get(splits[0], {}),  # the first eval split (MNIST: test; LM: valid)
        "final_by_split": last,
        "history": history,
        "plan": dataclasses.asdict(s.plan.optim),
        "run_plan": {k: v for k, v in dataclasses.asdict(s.plan).items() if k != "optim"},
        "train_time_s": s.train_time,
        "wall_time_s": s.wall_time(),  # every process's, as train_time_s
        "devices": s.plan.devices,
    }
    rundir.write_json(rundir.path(s.workdir) / "results.json", result, is_writer=s.writer_enabled)
    record = provenance.record(s.config.seed, result["wall_time_s"], s.train_time)
    rundir.write_json(
        rundir.path(s.workdir) / "provenance.json", record, is_writer=s.writer_enabled
    )
    if s.writer_enabled:
        print(f"done: {total} steps in {format_duration(result['wall_time_s'])}", flush=True)
    result["state"] = s.state
    return result


def train_and_evaluate(config, workdir: str) -> dict[str, Any]:
    """``train(build(config, workdir), workdir)``: what the ``lbtrain`` command runs."""
    from lbtrain import setup

    rundir.check_writable(workdir)
    with hosts.workdir_lock(workdir) as lock:  # before the data writes its vocabulary there
        return train(setup.build(config, workdir), workdir, lock)
