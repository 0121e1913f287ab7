"""What runs inside each SLURM job of the ``slurm`` executor: the batch script ``exec``s this
module, which starts the run's program (through ``srun`` when the run has several processes),
forwards the signals that ask it to stop, and requeues its own job when the time limit stopped a
run that has no result yet.

    python -m experiments.backends.slurm.entry --workdir=W [--srun] [--max_requeues=N]
        [--log=FILE] -- PROGRAM ARGS...

- ``SIGUSR1`` (``sbatch --signal=B:USR1@<margin>``: the time limit is near; only the batch step's
  main process, this one, gets it): SIGTERM is forwarded to the run's processes (lbtrain saves a
  checkpoint and exits 0 without ``results.json``). Once they have exited, a workdir without a
  result (:func:`~experiments.backends.workdir.has_result`) is requeued with ``scontrol
  requeue $SLURM_JOB_ID`` while ``$SLURM_RESTART_COUNT`` is below ``--max_requeues``; the next
  attempt resumes from the checkpoint.
- ``SIGTERM`` (SLURM's ``scancel``, ``scontrol requeue``, a preemption, the executor's stop): it is
  forwarded too, and the job is not requeued here (SLURM requeues it, or it was cancelled).

A signal reaches the processes of an ``srun`` step through ``scancel --signal=TERM $SLURM_JOB_ID``
(every step but the batch step), never by signalling ``srun`` itself: ``srun`` answers a SIGTERM by
killing its tasks at once. A second SIGTERM does lbtrain no harm (its handler, or JAX's preemption
notifier, only sets a flag again).

``--log``: the job's ``sbatch --output`` file, for a workdir on ``gs://`` (``%j`` in its name: the
job's id); what was added to it since the last copy (``<log>.copied`` keeps the offset) is
appended to the workdir's ``stdout.log`` when the attempt ends. Exits with the program's status
(128 + N for a signal N).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

PREFIX = "slurm_job:"  # how its lines in the run's log begin


class _Signals:
    """The stop requests received so far; installed first thing, before a slow import."""

    def __init__(self):
        self.usr1 = self.term = False
        signal.signal(signal.SIGUSR1, self._usr1)
        signal.signal(signal.SIGTERM, self._term)

    def _usr1(self, signum, frame):
        self.usr1 = True

    def _term(self, signum, frame):
        self.term = True


def say(text: str) -> None:
    print(f"{PREFIX} {text}", flush=True)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.backends.slurm.entry")
    p.add_argument("--workdir", required=True, help="the run's workdir (local or gs://)")
    p.add_argument("--srun", action="store_true", help="start the program through srun")
    p.add_argument("--max_requeues", type=int, default=0, help="bound on SLURM_RESTART_COUNT")
    p.add_argument("--log", default="", help="the job's --output file, copied to a gs:// workdir")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS...")
    args = p.parse_args(argv)
    if args.program[:1] == ["--"]:
        args.program = args.program[1:]
    if not args.program:
        p.error("no program given (-- PROGRAM ARGS...)")
    return args


def srun_command(program: list[str], env: dict) -> list[str]:
    """``program`` as an ``srun`` step over the job's tasks (any task that fails ends the step;
    SLURM 22.05's srun no longer takes ``--cpus-per-task`` from the allocation by itself)."""
    cmd = ["srun", "--kill-on-bad-exit=1"]
    if env.get("SLURM_CPUS_PER_TASK"):
        cmd.append(f"--cpus-per-task={env['SLURM_CPUS_PER_TASK']}")
    return [*cmd, *program]


RESEND = 10.0  # seconds between the stop requests to an srun step that has not yet stopped


class _Attempt:
    """The program, started and followed until it exits, with the signals forwarded."""

    def __init__(self, program: list[str], srun: bool, job_id: str, signals: _Signals):
        self.srun, self.job_id, self.signals = srun, job_id, signals
        self.command = srun_command(program, os.environ) if srun else list(program)
        self.proc = subprocess.Popen(self.command)
        self.forwarded = False  # the stop request has reached the program
        self.asked = False  # a stop request came (USR1 or TERM)

    def _forward(self) -> bool:
        """SIGTERM to the program's processes; whether it was delivered."""
        if not self.srun:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            return True
        # the srun step's tasks (every step but the batch step), not srun itself
        result = subprocess.run(
            ["scancel", "--signal=TERM", self.job_id], capture_output=True, text=True, check=False
        )
        return result.returncode == 0

    def _note(self) -> None:
        """Say once which stop request came."""
        if self.asked or not (self.signals.usr1 or self.signals.term):
            return
        self.asked = True
        if self.signals.term:
            say("SIGTERM (a requeue, a preemption or a cancel): the run saves a checkpoint")
        else:
            say("the time limit is near: the run saves a checkpoint (SIGTERM)")

    def wait(self) -> int:
        """Follow the program to its end; its exit status."""
        last_try = 0.0
        while True:
            try:
                code = self.proc.wait(timeout=0.2)
                self._note()  # SLURM's SIGTERM may have reached the program first
                return code if code >= 0 else 128 - code
            except subprocess.TimeoutExpired:
                pass
            self._note()
            # an srun step may not have started yet (scancel then succeeds and reaches nothing):
            # try each second until scancel succeeds, then every RESEND seconds while the program
            # runs (a repeated SIGTERM only asks lbtrain again for the stop it is making)
            wait = RESEND if self.forwarded and self.srun else 1.0
            if self.asked and (self.srun or not self.forwarded):
                if time.monotonic() - last_try >= wait:
                    last_try = time.monotonic()
                    self.forwarded = self._forward() or self.forwarded


def _copy_log(log: str, workdir: str) -> None:
    """What ``log`` gained since the last copy, appended to the workdir's ``stdout.log``."""
    from experiments.backends.workdir import append_log

    mark = log + ".copied"
    try:
        with open(mark) as f:
            offset = int(f.read().strip() or 0)
    except (OSError, ValueError):
        offset = 0
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            new = f.read()
    except OSError as e:
        say(f"cannot read the job's log {log}: {e}")
        return
    if new:
        append_log(workdir, new)
    with open(mark, "w") as f:
        f.write(str(offset + len(new)))


def _requeue(job_id: str) -> None:
    result = subprocess.run(
        ["scontrol", "requeue", job_id], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        say(f"scontrol requeue {job_id} failed: {result.stderr.strip() or result.returncode}")


def main(argv: list[str] | None = None) -> int:
    signals = _Signals()
    args = parse(sys.argv[1:] if argv is None else argv)

    from experiments.backends.workdir import has_result

    job_id = os.environ.get("SLURM_JOB_ID", "")
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    # (%j in the file's name only: the folder is as it is)
    folder, name = os.path.split(args.log)
    log = os.path.join(folder, name.replace("%j", job_id)) if args.log else ""
    tasks = os.environ.get("SLURM_NTASKS", "1")
    say(
        f"job {job_id or '?'} attempt {restarts + 1} on {socket.gethostname()}, {tasks} "
        f"process(es) at {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )
    code, requeue = 0, False
    if has_result(args.workdir):
        say(f"{args.workdir} already has its result: nothing to run")
    elif signals.term:
        say("SIGTERM before the run started: not started")
        code = 143
    else:
        attempt = _Attempt(args.program, args.srun, job_id, signals)
        say(f"started: {shlex.join(attempt.command)}")
        code = attempt.wait()
        say(f"the run exited with {code}")
        if signals.usr1 and not signals.term and not has_result(args.workdir):
            if restarts < args.max_requeues:
                say(
                    f"no result yet: requeueing job {job_id} (requeue {restarts + 1} of at most "
                    f"{args.max_requeues}); the next attempt resumes from the checkpoint"
                )
                requeue = True
            else:
                say(
                    f"no result after {restarts} requeue(s), the most --max_requeues allows: not "
                    "requeued (the next reproduce.py resumes it)"
                )
    if log:  # first: a requeue ends this process (SIGTERM, then SIGKILL after KillWait)
        _copy_log(log, args.workdir)
    if requeue:
        _requeue(job_id)  # SLURM then sends this process a SIGTERM: it is already ending
    return code


if __name__ == "__main__":
    sys.exit(main())
