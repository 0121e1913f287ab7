"""A real one-node SLURM cluster for tests: Debian's ``slurmctld``, ``slurmd`` and ``munged`` as
plain background processes (no systemd) under one temporary folder, on ports of 127.0.0.1 chosen
free.

The node is named ``localhost`` and has this machine's cores and memory; one partition, ``debug``,
is the default. Settings that work in containers without a freezer cgroup (DESIGN.md section 7):
``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``, ``SlurmUser=root``, no accounting
database (``sacct`` exits 1 here; finished jobs are in the jobcomp file, ``jobcomp.txt``).

    cluster = SlurmCluster.start(folder)
    cluster.run(["sbatch", "--parsable", "job.sh"])   # the clients, with ``cluster.env``
    cluster.wait_idle(30)
    cluster.stop()                                     # jobs cancelled first, then the daemons

The daemons run in the foreground (``-D``, ``munged -F``) as children of this process, each in a
session of its own, with their logs in ``<folder>/log``; munged gets a fresh key and a socket
folder of mode 755 (it refuses any other). ``available()`` says whether the Debian packages are
installed (``missing()`` names what is not; ``SKIP_REASON`` is the line to skip with). Every wait is
bounded and ends with an error that says what it waited for, with the tail of each log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

INSTALL = "apt-get install --no-install-recommends slurmctld slurmd slurm-client munge"
SKIP_REASON = f"SLURM's Debian packages are not installed: {INSTALL}"

DAEMONS = ("slurmctld", "slurmd", "munged")
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "srun", "salloc", "sinfo")
# Debian installs the daemons in /usr/sbin, which a user's PATH may lack
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])

# slurmd drops a GPU without a device file ("file-less GPU") and warns about a regular file; these
# character devices exist everywhere and stand for count-only GPUs (CUDA_VISIBLE_DEVICES=0,1,...)
FAKE_GPU_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

PARTITION = "debug"
NODE = "localhost"


class SlurmError(RuntimeError):
    """A daemon did not start or stop, a command failed, or a wait ran past its bound."""


def missing() -> list[str]:
    """The daemons and clients that are not installed (empty when SLURM can run here)."""
    return [name for name in DAEMONS + CLIENTS if shutil.which(name, path=SEARCH_PATH) is None]


def available() -> bool:
    """Whether SLURM's Debian packages are installed (``missing()`` names what is not)."""
    return not missing()


def not_root() -> str | None:
    """Why this process cannot run the cluster although the packages are installed, or None:
    slurmd starts each job as its user, and SlurmUser=root needs root."""
    if os.geteuid() != 0:
        return "SLURM's test cluster runs its daemons as root (SlurmUser=root); this process is not"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def memory_mb() -> int:
    """The machine's memory in MB as slurmd counts it (MemTotal)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise SlurmError("no MemTotal in /proc/meminfo")


def _wait(what: str, check, timeout: float, logs: str = "", interval: float = 0.1):
    """``check()`` until it returns a true value (which is returned), or a SlurmError after
    ``timeout`` seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SlurmError(f"SLURM: {what} not within {timeout:g} s{logs}")
        time.sleep(interval)


class SlurmCluster:
    """A running cluster; build one with ``SlurmCluster.start(folder)``."""

    def __init__(self, root: Path, auth: str, gres_gpus: int):
        self.root = Path(root)
        self.auth = auth
        self.gres_gpus = gres_gpus
        # nproc's count (the CPUs this process may use): slurmd drains a node whose configuration
        # claims more CPUs than it finds
        self.cpus = len(os.sched_getaffinity(0))
        self.memory_mb = memory_mb()
        self.ctld_port = free_port()
        self.slurmd_port = free_port()
        self.conf = self.root / "etc" / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.jobcomp = self.root / "log" / "jobcomp.txt"
        self.processes: dict[str, subprocess.Popen] = {}
        self.env = dict(os.environ)
        self.env["SLURM_CONF"] = str(self.conf)
        self.env["PATH"] = SEARCH_PATH
        # a caller's allocation must not leak into this cluster's clients
        for key in list(self.env):
            if key.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_")):
                if key != "SLURM_CONF":
                    del self.env[key]

    # --- start -------------------------------------------------------------------------------

    @classmethod
    def start(
        cls, root, auth: str = "munge", gres_gpus: int = 0, timeout: float = 30.0
    ) -> SlurmCluster:
        """Write the configuration under ``root`` (which must exist) and start the daemons; returns
        once the node is idle. ``auth``: ``munge`` (a munged of its own) or ``none``
        (``AuthType=auth/none``, no munged). ``gres_gpus``: that many ``gpu`` GRES on the node,
        each backed by a character device that is not a GPU (``FAKE_GPU_FILES``)."""
        if not available():
            raise SlurmError(f"{SKIP_REASON} (missing: {' '.join(missing())})")
        if not_root():
            raise SlurmError(not_root())
        if auth not in ("munge", "none"):
            raise ValueError(f"auth={auth!r}: munge or none")
        if not 0 <= gres_gpus <= len(FAKE_GPU_FILES):
            raise ValueError(f"gres_gpus={gres_gpus}: 0 to {len(FAKE_GPU_FILES)}")
        cluster = cls(root, auth, gres_gpus)
        try:
            cluster._write_config()
            if auth == "munge":
                cluster._start_munged(timeout)
            cluster._start_daemon(
                "slurmctld", ["slurmctld", "-D", "-i", "-f", str(cluster.conf)], timeout
            )
            _wait(
                "slurmctld answering",
                lambda: cluster.run(["scontrol", "ping"], check=False).returncode == 0,
                timeout,
                cluster._logs(),
                interval=0.2,
            )
            cluster._start_daemon(
                "slurmd", ["slurmd", "-D", "-N", NODE, "-f", str(cluster.conf)], timeout
            )
            cluster.wait_idle(timeout)
        except BaseException:
            cluster._stop_daemons(timeout=10)
            raise
        return cluster

    def _write_config(self) -> None:
        for sub in ("etc", "state", "spool", "log", "run", "munge", "jobs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        root = self.root
        lines = [
            "ClusterName=lbtest",
            f"SlurmctldHost={NODE}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'run' / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            f"PlugStackConfig={root / 'etc' / 'plugstack.conf'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.jobcomp}",
            "MpiDefault=none",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=batch_sched_delay=0",
            "ReturnToService=2",
            "MailProg=/bin/true",
            # short waits: a cancelled job is killed 5 s after its SIGTERM
            "KillWait=5",
            "InactiveLimit=0",
            "MinJobAge=300",
        ]
        if self.auth == "none":
            lines += ["AuthType=auth/none", "CredType=cred/none"]
        else:
            lines += [
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={self.munge_socket}",
            ]
        node = f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mb}"
        if self.gres_gpus:
            lines.append("GresTypes=gpu")
            node += f" Gres=gpu:{self.gres_gpus}"
            (root / "etc" / "gres.conf").write_text(
                "AutoDetect=off\n"
                + "".join(
                    f"NodeName={NODE} Name=gpu File={device}\n"
                    for device in FAKE_GPU_FILES[: self.gres_gpus]
                )
            )
        lines += [
            node + " State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")
        (root / "etc" / "plugstack.conf").write_text("")

    def _start_munged(self, timeout: float) -> None:
        folder = self.munge_socket.parent
        if len(str(self.munge_socket)) > 100:  # sun_path holds 108 bytes
            raise SlurmError(
                f"SLURM: {self.munge_socket} is too long a path for a socket: start the cluster "
                "in a shorter folder (TMPDIR)"
            )
        folder.chmod(0o755)  # munged refuses a socket folder that others cannot search
        key = folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self._start_daemon(
            "munged",
            [
                "munged",
                "-F",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--pid-file={folder / 'munged.pid'}",
                f"--seed-file={folder / 'munged.seed'}",
            ],
            timeout,
        )
        _wait("munged's socket", self.munge_socket.exists, timeout, self._logs())

    def _start_daemon(self, name: str, argv: list[str], timeout: float) -> None:
        out = open(self.root / "log" / f"{name}.out", "ab")
        with out:
            self.processes[name] = subprocess.Popen(
                argv,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of the tests reaches stop(), not the daemons
            )
        time.sleep(0.05)
        if self.processes[name].poll() is not None:
            raise SlurmError(
                f"SLURM: {name} exited at once with {self.processes[name].returncode}{self._logs()}"
            )

    def _logs(self) -> str:
        """The tail of each daemon's logs, for an error message."""
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            if path.name == self.jobcomp.name:
                continue
            text = path.read_text(errors="replace").strip().splitlines()[-8:]
            if text:
                parts.append(f"--- {path} ---\n" + "\n".join(text))
        return ("\n" + "\n".join(parts)) if parts else ""

    # --- clients -----------------------------------------------------------------------------

    def run(self, cmd: list[str], check: bool = True, timeout: float = 30.0, **kwargs):
        """A client command (sbatch, squeue, scancel, scontrol, srun, ...) against this cluster;
        its output as text. ``check``: a non-zero exit is a SlurmError with its stderr."""
        try:
            result = subprocess.run(
                cmd,
                env=kwargs.pop("env", self.env),
                capture_output=True,
                text=True,
                timeout=timeout,
                **kwargs,
            )
        except subprocess.TimeoutExpired as e:
            raise SlurmError(f"SLURM: {' '.join(cmd)} ran past {timeout:g} s") from e
        if check and result.returncode != 0:
            raise SlurmError(
                f"SLURM: {' '.join(cmd)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    def sbatch(self, *args: str) -> int:
        """Submit with ``sbatch --parsable ARGS``; the job's id."""
        out = self.run(["sbatch", "--parsable", *args]).stdout.strip()
        return int(out.split(";")[0])

    def jobs(self) -> list[tuple[str, str]]:
        """``(job id, state)`` of every job in the queue (array tasks as ``ID_INDEX``)."""
        out = self.run(["squeue", "--noheader", "--array", "--format=%i %T"]).stdout
        return [tuple(line.split()) for line in out.splitlines() if line.strip()]

    def job_state(self, job_id) -> str | None:
        """The job's state as ``scontrol`` has it (also a while after it ended), or None."""
        result = self.run(["scontrol", "show", "job", "--oneliner", str(job_id)], check=False)
        if result.returncode != 0:
            return None
        for field in result.stdout.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
        return None

    def node_state(self) -> str:
        out = self.run(["scontrol", "show", "node", "--oneliner", NODE], check=False).stdout
        for field in out.split():
            if field.startswith("State="):
                return field.split("=", 1)[1]
        return ""

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until the queue is empty and the node idle (not draining, down or still allocated)."""

        def idle():
            state = self.node_state()
            return state.split("+")[0] == "IDLE" and "DRAIN" not in state and not self.jobs()

        _wait("the node idle with an empty queue", idle, timeout, self._logs(), interval=0.2)

    def wait_job(self, job_id, states, timeout: float = 30.0) -> str:
        """Until the job's state is one of ``states``; that state."""
        states = {states} if isinstance(states, str) else set(states)

        def reached():
            state = self.job_state(job_id)
            return state if state in states else None

        return _wait(
            f"job {job_id} {'/'.join(sorted(states))} (last: {self.job_state(job_id)})",
            reached,
            timeout,
            self._logs(),
        )

    def wait_gone(self, job_id, timeout: float = 30.0) -> None:
        """Until the job has left ``squeue``."""
        job = str(job_id)

        def gone():
            return not any(j == job or j.startswith(job + "_") for j, _ in self.jobs())

        _wait(f"job {job} leaving the queue", gone, timeout, self._logs())

    # --- stop --------------------------------------------------------------------------------

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel every job, wait for the queue to empty, then stop slurmd, slurmctld and munged;
        a SlurmError if any of that ran past its bound or a slurmstepd was left."""
        errors = []
        if self.processes.get("slurmctld") and self.processes["slurmctld"].poll() is None:
            try:
                self.run(["scancel", "--full", "--user=root"], check=False)
                _wait(
                    "the queue empty after scancel",
                    lambda: not self.jobs(),
                    timeout,
                    self._logs(),
                    interval=0.2,
                )
            except SlurmError as e:
                errors.append(str(e))
        try:  # a job's steps end a moment after it left the queue
            _wait(
                "the jobs' slurmstepd ending",
                lambda: not stepds(self.conf),
                timeout,
                self._logs(),
                interval=0.2,
            )
        except SlurmError as e:
            errors.append(str(e))
        errors += self._stop_daemons(timeout)
        left = stepds(self.conf)
        if left:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            errors.append(f"SLURM: slurmstepd left after the daemons stopped: {left}")
        if errors:
            raise SlurmError("\n".join(errors))

    def _stop_daemons(self, timeout: float) -> list[str]:
        errors = []
        for name in ("slurmd", "slurmctld", "munged"):
            process = self.processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
                errors.append(f"SLURM: {name} ignored SIGTERM for {timeout:g} s and was killed")
        return errors


def stepds(conf: Path) -> list[int]:
    """The ids of the live slurmstepd processes of the cluster configured by ``conf`` (slurmd hands
    them its environment, ``SLURM_CONF`` included); zombies, which have ended, are not counted."""
    found = []
    want = f"SLURM_CONF={conf}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() != "slurmstepd":
                continue
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state in ("Z", "X"):
                continue
            if want in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except (OSError, IndexError):
            continue
    return found
