"""The local executor: each run a ``python -m lbtrain.main`` process on this machine, its output
in ``<workdir>/stdout.log``.

On the CPU (no ``devices``) ``jobs`` processes run at once. With ``placement="pin"`` (the default)
each gets its share of the cores this process may use: C cores and N jobs give each run C/N of them
(:func:`cpu_shares`), its process pinned to them before it starts (``sched_setaffinity``) and the
thread pools it may open sized to match: XLA's CPU client sizes its pools from the affinity mask
it starts with, and ``OMP_NUM_THREADS`` and the BLAS variables cover the rest. With
``placement="share"`` every process sees every core and the operating system spreads them
(docs/performance.md, "Runs side by side on the CPU", has both measured).
On GPUs each slot is one GPU (``devices``: their indices) or a share of one (``runs_per_device``
k > 1): the process sees only its GPU (``CUDA_VISIBLE_DEVICES``) and, when k runs share it,
preallocates 1/k of its memory less a margin (``XLA_PYTHON_CLIENT_MEM_FRACTION``) instead of JAX's
default 75 %, which would leave nothing to the others.

The processes stay in the scheduler's process group: a Ctrl-C at the terminal reaches each run
directly, which checkpoints at its next step and exits (``lbtrain`` takes SIGINT as it takes
SIGTERM), while the scheduler stops them all the same (:meth:`_Process.stop`) and waits for them, so
a SIGINT to the scheduler alone keeps the same work; a second Ctrl-C ends the runs at once. Killing
the whole group (SIGKILL) still ends every run with the scheduler.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from absl.flags import FLAGS

from experiments import ROOT
from experiments.backends import workdir as workdir_files
from experiments.sweep.executors.base import Context, Event, ExecutorError, Slot
from experiments.sweep.state import SweepState
from lbtrain import rundir

NAME = "local"
HELP = "local: processes on this machine (its CPU, or --devices: its GPUs)"
# of each GPU's memory, what the runs sharing it may preallocate in all (the rest: CUDA's own
# context per process, and headroom)
SHARED_MEMORY = 0.9
# how ``jobs`` runs on the CPU use its cores: pin (each its own share) | share (all see all)
PLACEMENTS = ("pin", "share")
DEFAULT_PLACEMENT = "pin"
# the thread-count variables of the pools a run may open beside XLA's (OpenMP, the BLAS libraries)
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# of the memory this process may use, what the runs alive at once may hold together by default
# (the rest: the operating system, the scheduler, the page cache the data is read through)
HOST_MEMORY_SHARE = 0.9
# a container's memory limit, cgroup v2 and v1 (read as the container sees its own hierarchy)
CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def usable_memory_gb(limits=CGROUP_LIMITS) -> float:
    """The memory this process may use, in GB (10^9 bytes): the kernel's MemTotal, or a
    container's memory limit where one is set lower (``max`` or a huge number: none)."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in limits:
        try:
            with open(path) as f:
                total = min(total, int(f.read().strip()))
        except (OSError, ValueError):  # absent, or "max"
            continue
    return total / 1e9


def cpu_shares(cores: list[int], jobs: int) -> list[tuple[int, ...]]:
    """Each of ``jobs`` runs' cores, out of ``cores``: contiguous blocks of C // N (the first C % N
    runs one core more) when there are at least as many cores as jobs, else one core each, in turn
    (runs i and i + C share core i)."""
    cores = sorted(cores)
    if not cores or jobs < 1:
        raise ValueError(f"cpu_shares: {len(cores)} cores for {jobs} jobs")
    if jobs > len(cores):
        return [(cores[i % len(cores)],) for i in range(jobs)]
    size, extra = divmod(len(cores), jobs)
    out, start = [], 0
    for i in range(jobs):
        n = size + (i < extra)
        out.append(tuple(cores[start : start + n]))
        start += n
    return out


def cpu_env(cores: tuple[int, ...]) -> dict[str, str]:
    """The environment of a run pinned to ``cores``: the thread pools beside XLA's sized to them."""
    return {v: str(len(cores)) for v in THREAD_VARS}


def slot_env(device: int | None, runs_per_device: int) -> dict[str, str]:
    """The environment variables a run on ``device`` gets, when ``runs_per_device`` share it."""
    if device is None:
        return {}
    env = {"CUDA_VISIBLE_DEVICES": str(device)}
    if runs_per_device > 1:
        # two decimals, rounded down: the shares never add up to more than SHARED_MEMORY
        share = int(SHARED_MEMORY / runs_per_device * 100) / 100
        env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{share:.2f}"
    return env


def visible_gpus() -> list[int]:
    """The indices of this machine's GPUs, as ``nvidia-smi`` lists them (none without it)."""
    if shutil.which("nvidia-smi") is None:
        return []
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [int(x) for x in out.stdout.split()] if out.returncode == 0 else []


# pins itself to the cores of argv[1], then becomes the program of argv[2:] (the same process:
# the scheduler's pid and signals reach the run), so every thread the run starts inherits the mask;
# no fork hook runs in the scheduler (a preexec_fn would fork a multithreaded JAX process)
_PIN = (
    "import os, sys; "
    "os.sched_setaffinity(0, [int(c) for c in sys.argv[1].split(',')]); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def pinned(argv: list[str], cores: tuple[int, ...]) -> list[str]:
    """``argv`` run pinned to ``cores``: a small Python sets its own affinity, then execs it."""
    program = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0]) or argv[0]
    return [sys.executable, "-c", _PIN, ",".join(map(str, cores)), program, *argv[1:]]


class _Process:
    """A run's process; its log is appended to the workdir's ``stdout.log`` (through a local file,
    copied there when it ends, for a ``gs://`` workdir)."""

    def __init__(
        self, argv: list[str], env: dict[str, str], workdir: str, cores: tuple[int, ...] = ()
    ):
        self.workdir = workdir
        if rundir.is_cloud(workdir):
            self.log_path = tempfile.mkstemp(prefix="lbtrain-", suffix=".log")[1]
        else:
            os.makedirs(workdir, exist_ok=True)
            self.log_path = os.path.join(workdir, workdir_files.LOG_NAME)
        if cores:
            argv = pinned(argv, cores)
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.pid = self.proc.pid
        self.launch = {"pid": self.pid, **env, **({"cpus": list(cores)} if cores else {})}

    def events(self) -> list[Event]:
        return []  # a local run reports nothing between its start and its end

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None and rundir.is_cloud(self.workdir) and self.log_path:
            with open(self.log_path, "rb") as f:
                workdir_files.append_log(self.workdir, f.read())
            os.remove(self.log_path)
            self.log_path = ""
        return code

    def stop(self) -> bool:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)  # lbtrain saves a checkpoint and exits
        return True


class LocalExecutor:
    """``jobs`` processes on the CPU (each pinned to its share of ``cores``, default: the cores this
    process may use, with ``placement="pin"``), or one slot per (GPU, share) of ``devices``."""

    name = "local"

    def __init__(
        self,
        jobs: int = 1,
        devices: list[int] | None = None,
        runs_per_device: int = 1,
        program: tuple[str, ...] = (sys.executable, "-m", "lbtrain.main"),
        placement: str = DEFAULT_PLACEMENT,
        cores: list[int] | None = None,
        host_memory_gb: float = 0.0,
    ):
        """``host_memory_gb``: what the runs alive at once may hold together (their declared
        :attr:`~experiments.common.Run.memory_gb`); 0: :data:`HOST_MEMORY_SHARE` of
        :func:`usable_memory_gb`."""
        if placement not in PLACEMENTS:
            raise ExecutorError(f"placement {placement!r}: choose one of {', '.join(PLACEMENTS)}")
        if not host_memory_gb >= 0:  # NaN too
            raise ExecutorError(
                f"--host_memory_gb={host_memory_gb}: give the GB the runs may hold together, or 0 "
                f"for {HOST_MEMORY_SHARE:.0%} of the memory this process may use"
            )
        self._memory = host_memory_gb or HOST_MEMORY_SHARE * usable_memory_gb()
        self.program = program  # what a run's arguments are given to
        self.runs_per_device = max(1, runs_per_device)
        self.devices = devices or []
        self.placement = placement
        pinned = not self.devices and placement == "pin"
        # slot name -> the cores its runs are pinned to (none: every core)
        self._cores: dict[str, tuple[int, ...]] = {}
        if self.devices:
            self._slots = [
                (Slot(f"gpu{d}" + (f".{i}" if self.runs_per_device > 1 else ""), 1), d)
                for d in self.devices
                for i in range(self.runs_per_device)
            ]
        else:
            self._slots = [(Slot(f"cpu.{i}" if jobs > 1 else "cpu"), None) for i in range(jobs)]
            if pinned:
                allowed = sorted(os.sched_getaffinity(0)) if cores is None else cores
                shares = cpu_shares(allowed, jobs)
                self._cores = {s.name: c for (s, _), c in zip(self._slots, shares, strict=True)}

    def slots(self) -> list[Slot]:
        return [slot for slot, _ in self._slots]

    def host_memory_gb(self) -> float:
        return self._memory

    def env(self, slot: Slot) -> dict[str, str]:
        """The environment variables of a run on ``slot``."""
        device = next(d for s, d in self._slots if s == slot)
        cores = self._cores.get(slot.name)
        return cpu_env(cores) if cores else slot_env(device, self.runs_per_device)

    def cores(self, slot: Slot) -> tuple[int, ...]:
        """The cores a run on ``slot`` is pinned to (empty: not pinned, it sees every core)."""
        return self._cores.get(slot.name, ())

    def check(self, runs) -> None:
        pass  # the scheduler refuses a run no slot fits; nothing else can be wrong here

    def start(self, slot: Slot, run, args: list[str], workdir: str, past) -> _Process:
        return _Process([*self.program, *args], self.env(slot), workdir, self.cores(slot))

    def adopt(self, saved: SweepState, args_for) -> dict:
        # a local run outlives its scheduler only when that was killed alone; its workdir lock
        # refuses a second copy, which then stops without a result and is retried next pass
        return {}

    def tick(self, idle) -> None:
        pass  # nothing to release: processes end with their runs

    def slot_records(self) -> dict:
        return {}

    def close(self, interrupted: bool) -> list[str]:
        return []


# ------------------------------------------------------------------ flags (scripts/reproduce.py)


def define_flags(flags) -> list:
    return [
        flags.DEFINE_list(
            "devices",
            [],
            "local: the GPUs to run on, one slot each (indices, or all); unset: every run sees "
            "the whole machine.",
        ),
        flags.DEFINE_integer(
            "runs_per_device",
            1,
            "local, with --devices: runs sharing each GPU, each with 1/k of its memory.",
        ),
        flags.DEFINE_float(
            "host_memory_gb",
            0.0,
            "local: the host memory, in GB, the runs alive at once may hold together; a run that "
            "declares its peak (the plan's memory_gb) starts only while it fits beside the others' "
            f"(default 0: {HOST_MEMORY_SHARE:.0%} of the memory this process may use: MemTotal, "
            "or a container's lower limit).",
        ),
        flags.DEFINE_enum(
            "cpu_placement",
            DEFAULT_PLACEMENT,
            PLACEMENTS,
            "local, on the CPU: pin (each of the --jobs runs pinned to its share of the cores, "
            "its thread pools sized to match) or share (every run sees every core).",
        ),
    ]


def _devices(values: list[str]) -> list[int]:
    """--devices as GPU indices (``all``: every GPU nvidia-smi lists)."""
    if values == ["all"]:
        found = visible_gpus()
        if not found:
            raise ExecutorError("--devices=all found no GPU (nvidia-smi lists none)")
        return found
    try:
        return [int(d) for d in values]
    except ValueError:
        raise ExecutorError(
            f"--devices={','.join(values)}: give GPU indices (0,1) or all"
        ) from None


def from_flags(context: Context) -> LocalExecutor:
    if FLAGS.devices or FLAGS.runs_per_device != 1:
        if not FLAGS.devices:
            raise ExecutorError("--runs_per_device needs --devices (the GPUs to share)")
        if FLAGS.runs_per_device < 1:
            raise ExecutorError("--runs_per_device must be at least 1")
        return LocalExecutor(
            devices=_devices(FLAGS.devices),
            runs_per_device=FLAGS.runs_per_device,
            host_memory_gb=FLAGS.host_memory_gb,
        )
    return LocalExecutor(
        jobs=max(1, context.jobs),
        placement=FLAGS.cpu_placement,
        host_memory_gb=FLAGS.host_memory_gb,
    )


def chips(context: Context):
    """One GPU a run with --devices; else --chips, or not known."""
    return context.chips or (1 if FLAGS.devices else None)
