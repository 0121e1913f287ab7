#!/usr/bin/env python3
"""Launch an lbtrain run on a Cloud TPU VM slice, watch it, stop it, fetch its logs, delete the
slice.

    scripts/tpu_launch.sh --name lb-v4 --zone us-central2-b --accelerator v4-32 --queued --spot \\
        --delete -- --config=configs/ptb_lstm.py:size=large,batch=1280,scheme=legw \\
           --config.data.dir=gs://BUCKET/ptb --workdir=gs://BUCKET/runs/ptb_large_1280

What one launch does, in order (--dry-run prints every command instead of running it):
  1. the slice: --create (gcloud compute tpus tpu-vm create, retried a few times when the zone is
     out of capacity) or --queued (a queued resource, polled until ACTIVE); a preempted spot VM is
     deleted and recreated; without either flag the named TPU VM must exist;
  2. the code: `git archive` of the checkout (one archive per launch, named by its launch id),
     copied to every worker and unpacked into ~/lbtrain/launches/<launch id>/src there;
  3. the install, on every worker: uv (https://astral.sh/uv) with a Python it downloads itself
     (--python, default 3.12: the TPU images' own Python 3.10 is older than lbtrain needs), a
     virtual environment per launch, `jax[tpu]` and lbtrain[offline,gcs] in it;
  4. the run: processes still holding the TPU from an earlier run are ended, then `lbtrain ARGS`
     starts detached on every worker (it outlives this command and the ssh session), with cwd = the
     unpacked source, LBTRAIN_DISTRIBUTED_AUTO=1 (JAX finds the slice's hosts itself) and its output
     in ~/lbtrain/launches/<launch id>/run.log on that worker;
  5. --follow streams every worker's log here until the run ends; --logs copies them here; --delete
     waits for the run to end and deletes the slice, and also deletes it when anything fails or the
     launcher is interrupted (Ctrl-C, SIGTERM, SIGHUP), so a failed launch does not leave a slice
     billing.

Later, on the same slice: --follow, --logs, --status, --stop (SIGTERM: lbtrain checkpoints and
exits), --delete. A second run is refused while one is live (--stop it first). Standard library
only, Python >= 3.8: it runs on the machine you launch from; the workers get their own Python.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROG = "tpu_launch"

# Cloud TPU's "TPU software versions" page: the runtime image for JAX per TPU generation.
IMAGES = {
    "v2": "tpu-ubuntu2204-base",
    "v3": "tpu-ubuntu2204-base",
    "v4": "tpu-ubuntu2204-base",
    "v5litepod": "v2-alpha-tpuv5-lite",  # v5e
    "v5e": "v2-alpha-tpuv5-lite",
    "v5p": "v2-alpha-tpuv5",
    "v6e": "v2-alpha-tpuv6e",
}

# One line per queued-resource state (the TPU API's QueuedResourceState.State).
QUEUED_STATES = {
    "CREATING": "request received, being validated",
    "ACCEPTED": "accepted into the queue",
    "WAITING_FOR_RESOURCES": (
        "queued, waiting for capacity (minutes to hours; --wait-timeout bounds the wait)"
    ),
    "PROVISIONING": "capacity found, the TPU VMs are being created",
    "ACTIVE": "active: the TPU VMs are ready",
    "FAILED": "failed",
    "SUSPENDING": "its TPU VMs are being deleted (preempted or ended)",
    "SUSPENDED": "its TPU VMs were deleted (preempted or ended)",
    "DELETING": "being deleted",
}
QUEUED_WAITING = (
    "CREATING",
    "ACCEPTED",
    "WAITING_FOR_RESOURCES",
    "PROVISIONING",
    "STATE_UNSPECIFIED",
)
QUEUED_DEAD = ("FAILED", "SUSPENDING", "SUSPENDED")
NODE_DEAD = ("PREEMPTED", "TERMINATED")  # a spot / preemptible VM in these states cannot restart
NODE_COMING = ("CREATING", "STARTING", "RESTARTING", "REPAIRING")
CAPACITY = re.compile(
    r"RESOURCE_EXHAUSTED|no more capacity|insufficient capacity|stockout|\bcode\W+8\b", re.I
)
NOT_FOUND = re.compile(r"NOT_FOUND|was not found|\b404\b")

# Exit codes of the worker helper that the launcher tells apart.
LIVE_RUN = 3  # a run is live on the worker: nothing was started
HELPER_MISSING = 127  # bash could not find the helper: nothing was ever launched on that worker


class LaunchError(Exception):
    """A failure with a message for the user; ``code`` becomes the exit status."""

    def __init__(self, message: str, code: int = 1, keep: bool = False):
        super().__init__(message)
        self.code = code
        # --delete must not delete the slice (a run that is not ours is live on it)
        self.keep = keep


class Interrupted(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def signal_name(signum: int) -> str:
    """The name of signal ``signum`` (``SIGTERM``), or its number if it has none."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)


def runtime_image(accelerator: str) -> str:
    """The TPU VM runtime image for an accelerator type (``v4-32`` -> its family's
    image); raises :class:`LaunchError` for a family not in ``IMAGES``."""
    family = accelerator.lower().split("-")[0]
    if family not in IMAGES:
        raise LaunchError(
            f"no runtime image known for --accelerator={accelerator}: pass --version=IMAGE "
            "(the images a zone offers: gcloud compute tpus tpu-vm versions list --zone=ZONE)"
        )
    return IMAGES[family]


def new_launch_id() -> str:
    """Sortable by time (the workers prune the oldest launches first) and unique across launches."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def parse_args(argv: list) -> argparse.Namespace:
    """The launcher's options from ``argv``; everything after ``--`` becomes
    ``lbtrain_args``. Refuses inconsistent flags with a usage error."""
    if "--" in argv:
        i = argv.index("--")
        argv, lbtrain_args = argv[:i], argv[i + 1 :]
    else:
        lbtrain_args = []
    p = argparse.ArgumentParser(
        prog="scripts/tpu_launch.sh",
        description=(
            "Run lbtrain on a Cloud TPU VM slice: create it (plain or queued), copy this checkout,"
            " install on\n"
            "every worker with its own Python (uv), start the run detached, follow / fetch logs /"
            " stop it, and delete\n"
            "the slice (also on any failure or interrupt, with --delete). Everything after `--`"
            " goes to lbtrain.\n"
            "Flags take `--flag value` or `--flag=value`. The whole guide: docs/cloud_tpu.md."
        ),
        epilog=(
            "examples:\n"
            "  scripts/tpu_launch.sh --name lb --zone us-central2-b --accelerator v4-32 --queued"
            " --spot --follow \\\n"
            "      -- --config=configs/mnist_lstm.py:batch=8192,scheme=legw"
            " --workdir=gs://BUCKET/runs/mnist_8k\n"
            "  scripts/tpu_launch.sh --name lb --zone us-central2-b --follow     # watch the run"
            " again\n"
            "  scripts/tpu_launch.sh --name lb --zone us-central2-b --logs       # copy every"
            " worker's log here\n"
            "  scripts/tpu_launch.sh --name lb --zone us-central2-b --stop       # lbtrain"
            " checkpoints and exits\n"
            "  scripts/tpu_launch.sh --name lb --zone us-central2-b --delete     # waits for the"
            " run, then deletes\n"
            "  scripts/tpu_launch.sh --name lb --zone us-central2-b --accelerator v5litepod-16"
            " --create --dry-run -- ..."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = p.add_argument_group("the slice")
    where.add_argument("--name", help="TPU VM name (also the queued resource's name with --queued)")
    where.add_argument(
        "--zone",
        help="zone, e.g. us-central2-b (the TPU types a zone offers: gcloud compute tpus "
        "tpu-vm accelerator-types list --zone=ZONE)",
    )
    where.add_argument(
        "--project", help="Google Cloud project (default: gcloud's configured project)"
    )
    where.add_argument(
        "--accelerator",
        default="v4-8",
        help="accelerator type, e.g. v4-32, v5litepod-16, v5p-8, v6e-8 (default: %(default)s)",
    )
    where.add_argument(
        "--version",
        help="TPU runtime image (default: chosen from --accelerator: v2-v4 "
        "tpu-ubuntu2204-base, v5e v2-alpha-tpuv5-lite, v5p v2-alpha-tpuv5, v6e v2-alpha-tpuv6e)",
    )
    make = p.add_argument_group("creating it")
    make.add_argument(
        "--create",
        action="store_true",
        help="create the TPU VM (gcloud compute tpus tpu-vm create) "
        "unless it exists and is READY; a PREEMPTED one is deleted and recreated",
    )
    make.add_argument(
        "--queued",
        action="store_true",
        help="create it through a queued resource (gcloud compute "
        "tpus queued-resources create) and wait until ACTIVE: the way the Cloud TPU docs recommend "
        "when capacity is short",
    )
    make.add_argument(
        "--spot", action="store_true", help="spot VMs (cheaper; preemptible at any time)"
    )
    make.add_argument(
        "--best-effort",
        action="store_true",
        help="with --queued: the best-effort tier (gcloud alpha)",
    )
    make.add_argument("--reserved", action="store_true", help="use reserved capacity")
    make.add_argument(
        "--create-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more flag for the create command, written with `=` since it starts with --: "
        "--create-arg=--service-account=SA, --create-arg=--internal-ips (repeatable)",
    )
    make.add_argument(
        "--wait-timeout",
        type=float,
        default=7200,
        metavar="SECONDS",
        help="with --queued: give up waiting for ACTIVE after this long (default: %(default)s)",
    )
    make.add_argument(
        "--poll-interval",
        type=float,
        default=30,
        metavar="SECONDS",
        help="seconds between state checks while waiting (default: %(default)s)",
    )
    make.add_argument(
        "--create-retries",
        type=int,
        default=3,
        metavar="N",
        help="retry a plain --create that fails for capacity N times (default: %(default)s)",
    )
    make.add_argument(
        "--retry-wait",
        type=float,
        default=60,
        metavar="SECONDS",
        help="seconds between those retries (default: %(default)s)",
    )
    inst = p.add_argument_group("the install on every worker")
    inst.add_argument(
        "--python",
        default="3.12",
        help="Python version uv installs for the run (default: %(default)s;"
        " lbtrain needs >= 3.11, the TPU images ship 3.10)",
    )
    inst.add_argument(
        "--jax", default="jax[tpu]", help="the JAX requirement (default: %(default)s)"
    )
    inst.add_argument(
        "--extras", default="offline,gcs", help="lbtrain's extras (default: %(default)s)"
    )
    inst.add_argument(
        "--ref",
        default="HEAD",
        help="the git revision of this checkout to copy (default: %(default)s; "
        "uncommitted changes are not copied)",
    )
    inst.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set an environment variable for the run on every worker (repeatable)",
    )
    inst.add_argument(
        "--keep-launches",
        type=int,
        default=3,
        metavar="N",
        help="launch folders kept on each worker besides the new one; older ones are pruned unless "
        "live (default: %(default)s)",
    )
    act = p.add_argument_group("the run")
    act.add_argument(
        "--follow",
        action="store_true",
        help="stream every worker's log (lines prefixed [wN]) until the "
        "run ends; exit non-zero if any worker failed",
    )
    act.add_argument(
        "--logs",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="copy each worker's log of the latest launch to DIR/worker-N.log "
        "(default DIR: tpu_logs/NAME/LAUNCH_ID)",
    )
    act.add_argument(
        "--status", action="store_true", help="print the latest launch's state on every worker"
    )
    act.add_argument(
        "--stop",
        action="store_true",
        help="end the live run: SIGTERM to its processes (lbtrain "
        "checkpoints and exits 0 on every host), SIGKILL after --stop-grace",
    )
    act.add_argument(
        "--stop-grace",
        type=float,
        default=180,
        metavar="SECONDS",
        help="seconds --stop waits before SIGKILL (default: %(default)s)",
    )
    act.add_argument(
        "--delete",
        action="store_true",
        help="when the run has ended, delete the TPU VM (or the queued "
        "resource and its VM); also on any failure or interrupt of this command",
    )
    act.add_argument(
        "--dry-run", action="store_true", help="print every command instead of running it"
    )
    act.add_argument(
        "--print-worker-script",
        action="store_true",
        help="print the helper this launcher installs on every worker, and exit",
    )
    opts = p.parse_args(argv)
    opts.lbtrain_args = lbtrain_args
    if opts.print_worker_script:
        return opts

    def usage(message):
        p.print_usage(sys.stderr)
        print(f"{p.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)

    if not opts.name:
        usage("--name TPU_NAME is required")
    if not opts.zone:
        usage("--zone ZONE is required (e.g. --zone us-central2-b)")
    if opts.create and opts.queued:
        usage(
            "--create and --queued both create the slice: choose one (--queued waits for capacity)"
        )
    if sum([opts.spot, opts.best_effort, opts.reserved]) > 1:
        usage("--spot, --best-effort and --reserved are different tiers: choose one")
    if opts.best_effort and not opts.queued:
        usage("--best-effort is a queued-resource tier: add --queued")
    if (opts.spot or opts.reserved or opts.create_arg) and not (opts.create or opts.queued):
        usage(
            "--spot / --reserved / --create-arg shape how the slice is created: add --create or "
            "--queued"
        )
    for item in opts.env:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", item):
            usage(f"--env {item!r}: give NAME=VALUE")
    for flag in ("wait_timeout", "poll_interval", "retry_wait", "stop_grace"):
        if getattr(opts, flag) < 0:
            usage(f"--{flag.replace('_', '-')} must be >= 0")
    if opts.create_retries < 0 or opts.keep_launches < 0:
        usage("--create-retries and --keep-launches must be >= 0")
    actions = [
        opts.create,
        opts.queued,
        opts.follow,
        opts.logs is not None,
        opts.status,
        opts.stop,
        opts.delete,
    ]
    if not opts.lbtrain_args and not any(actions):
        usage(
            "nothing to do: give lbtrain's arguments after `--` (e.g. -- "
            "--config=configs/mnist_lstm.py --workdir=gs://BUCKET/run), or --create / --queued / "
            "--follow / --logs / --status / --stop / --delete"
        )
    if opts.version is None:
        try:
            opts.version = runtime_image(opts.accelerator)
        except LaunchError as e:
            usage(str(e))
    return opts


class Launcher:
    def __init__(self, opts: argparse.Namespace):
        self.o = opts
        self.dry = opts.dry_run
        self.launch_id = new_launch_id()
        self.workers = None  # the slice's host count, from describe
        # whether the slice is a queued resource (decides how it is deleted)
        self.queued = opts.queued
        self.may_exist = False  # the slice may exist: the --delete trap must try to delete it
        # a run may be live on the slice: the --delete trap stops it before deleting
        self.run_live = False
        self.following = False
        self.tmp_files = []
        self.commit = ""
        self.lock = threading.Lock()

    # ---- output and subprocesses -----------------------------------------------------------------

    def say(self, message: str, err: bool = False):
        """Print a message as the launcher's own line (to stderr if ``err``); a comment under
        --dry-run."""
        with self.lock:
            if self.dry:  # the --dry-run output stays a script: messages are comments
                print(f"# {message}", flush=True)
            else:
                print(f"{PROG}: {message}", file=sys.stderr if err else sys.stdout, flush=True)

    def show(self, cmd: list):
        """Print the command about to run (the command itself under --dry-run)."""
        with self.lock:
            print(shlex.join(cmd) if self.dry else "$ " + shlex.join(cmd), flush=True)

    def note(self, text: str):
        """A comment line in --dry-run output."""
        if self.dry:
            print("# " + text, flush=True)

    def run(
        self,
        cmd: list,
        capture: bool = False,
        echo: bool = True,
        new_session: bool = False,
        timeout: float = None,
    ) -> subprocess.CompletedProcess:
        """Run ``cmd`` (shown first if ``echo``), its output captured if ``capture``, in a new
        session if ``new_session``; raises :class:`LaunchError` after ``timeout`` seconds or when
        the program is missing. Under --dry-run nothing runs and the result is an empty success."""
        if echo:
            self.show(cmd)
        if self.dry:
            return subprocess.CompletedProcess(cmd, 0, "", "")
        pipe = subprocess.PIPE if capture else None
        try:
            proc = subprocess.Popen(
                cmd, stdout=pipe, stderr=pipe, text=True, start_new_session=new_session
            )
        except FileNotFoundError:
            raise LaunchError(
                f"{cmd[0]} is not installed (or not on PATH): "
                "https://cloud.google.com/sdk/docs/install"
            )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_process(proc)
            raise LaunchError(f"`{shlex.join(cmd[:6])} ...` did not finish within {timeout:.0f} s")
        except BaseException:
            stop_process(proc)
            raise
        return subprocess.CompletedProcess(cmd, proc.returncode, out or "", err or "")

    def gcloud(self, *args: str, alpha: bool = False) -> list:
        """A ``gcloud [alpha] compute tpus ARGS`` command line with the zone and project."""
        cmd = (
            ["gcloud"]
            + (["alpha"] if alpha else [])
            + ["compute", "tpus", *args, f"--zone={self.o.zone}"]
        )
        return cmd + ([f"--project={self.o.project}"] if self.o.project else [])

    def ssh(self, command: str, worker="all") -> list:
        """The gcloud command that runs ``command`` on ``worker`` (``all``, or an index)."""
        return self.gcloud("tpu-vm", "ssh", self.o.name, f"--worker={worker}", "--command", command)

    def helper(self, *words: str) -> str:
        """The remote command running the worker helper installed by the last launch."""
        return 'bash "$HOME/lbtrain/bin/lbtrain-worker" ' + " ".join(quote_inner(w) for w in words)

    # ---- the slice -------------------------------------------------------------------------------

    def describe_node(self):
        """The TPU VM's describe JSON, or None when it does not exist."""
        res = self.run(
            self.gcloud("tpu-vm", "describe", self.o.name, "--format=json"),
            capture=True,
            echo=False,
        )
        return self._parse_describe(res, "TPU VM")

    def describe_queued(self):
        """The queued resource's description (a dict), or ``None`` if there is none."""
        res = self.run(
            self.gcloud("queued-resources", "describe", self.o.name, "--format=json"),
            capture=True,
            echo=False,
        )
        return self._parse_describe(res, "queued resource")

    def _parse_describe(self, res, what: str):
        if res.returncode != 0:
            if NOT_FOUND.search(res.stderr):
                return None
            raise LaunchError(f"could not describe {what} {self.o.name}: {last_line(res.stderr)}")
        try:
            return json.loads(res.stdout)
        except ValueError:
            raise LaunchError(
                f"gcloud describe of {what} {self.o.name} printed no JSON: {res.stdout[:200]!r}"
            )

    def provision(self, need_ready: bool = True) -> str:
        """Create the slice when asked; find its worker count. Its state, or "absent" (only when not
        need_ready)."""
        if self.dry:
            self._provision_dry()
            return "READY"
        if self.o.queued:
            self._ensure_queued()
        elif self.o.create:
            self._ensure_created()
        node = self.describe_node()
        if node is None and not need_ready:
            return "absent"
        if node is None:
            raise LaunchError(
                f"no TPU VM {self.o.name} in {self.o.zone}: add --create (or --queued) to create it"
            )
        self.may_exist = True  # from here on, with --delete, any failure deletes it
        state = node.get("state", "?")
        if state != "READY" and not need_ready:
            return state
        if state in NODE_DEAD:
            raise LaunchError(
                f"TPU VM {self.o.name} is {state}: a preempted VM cannot restart; rerun with "
                "--create (or --queued) to delete and recreate it (lbtrain resumes from the "
                "checkpoint in its workdir)"
            )
        if state != "READY":
            raise LaunchError(
                f"TPU VM {self.o.name} is {state}, not READY: wait, or check the Cloud console"
            )
        self.workers = max(1, len(node.get("networkEndpoints") or []))
        accel = node.get("acceleratorType", "")
        if accel and (self.o.create or self.o.queued) and accel != self.o.accelerator:
            self.say(
                f"warning: {self.o.name} is a {accel}, not --accelerator={self.o.accelerator}",
                err=True,
            )
        self.say(f"TPU VM {self.o.name}: READY, {accel or '?'}, {self.workers} worker(s)")
        return state

    def _provision_dry(self):
        if self.o.queued:
            self.note(
                f"unless queued resource {self.o.name} exists (then it is reused; FAILED / "
                "SUSPENDED: recreated)"
            )
            self.run(self._queued_create_cmd())
            self.note(
                f"then, every {self.o.poll_interval:g} s until ACTIVE (at most "
                f"{self.o.wait_timeout:g} s):"
            )
            self.show(self.gcloud("queued-resources", "describe", self.o.name, "--format=json"))
        elif self.o.create:
            self.note(f"unless TPU VM {self.o.name} exists and is READY (PREEMPTED: deleted first)")
            self.run(self._create_cmd())
        self.note("its state and worker count:")
        self.show(self.gcloud("tpu-vm", "describe", self.o.name, "--format=json"))

    def _create_cmd(self) -> list:
        tier = ["--spot"] if self.o.spot else ["--reserved"] if self.o.reserved else []
        return self.gcloud(
            "tpu-vm",
            "create",
            self.o.name,
            f"--accelerator-type={self.o.accelerator}",
            f"--version={self.o.version}",
            *tier,
            *self.o.create_arg,
        )

    def _queued_create_cmd(self) -> list:
        tier = ["--spot"] if self.o.spot else ["--reserved"] if self.o.reserved else []
        if self.o.best_effort:
            tier = ["--best-effort"]
        return self.gcloud(
            "queued-resources",
            "create",
            self.o.name,
            f"--node-id={self.o.name}",
            f"--accelerator-type={self.o.accelerator}",
            f"--runtime-version={self.o.version}",
            *tier,
            *self.o.create_arg,
            alpha=self.o.best_effort,
        )

    def _ensure_created(self):
        node = self.describe_node()
        state = node.get("state", "?") if node else None
        if state == "READY":
            self.say(f"TPU VM {self.o.name} exists and is READY: using it")
            return
        if state in NODE_COMING:
            self.may_exist = True
            self._wait_node_ready(state)
            return
        if state in NODE_DEAD:
            self.say(
                f"TPU VM {self.o.name} is {state}: deleting it and creating it again (--create)"
            )
            self.may_exist = True
            if self._delete_node(quiet=False) == "failed":
                raise LaunchError(f"could not delete the {state} TPU VM {self.o.name} (see above)")
        elif state is not None:
            raise LaunchError(
                f"TPU VM {self.o.name} is {state}: start it (gcloud compute tpus tpu-vm start) or "
                "delete it first"
            )
        cmd = self._create_cmd()
        for attempt in range(self.o.create_retries + 1):
            self.may_exist = True  # an interrupted create can still finish server-side
            res = self.run(cmd, capture=True)
            sys.stdout.write(res.stdout)
            if res.returncode == 0:
                self.say(f"created TPU VM {self.o.name} ({self.o.accelerator}, {self.o.version})")
                return
            sys.stderr.write(res.stderr)
            if not CAPACITY.search(res.stderr):
                raise LaunchError(f"could not create TPU VM {self.o.name}: {last_line(res.stderr)}")
            if attempt == self.o.create_retries:
                raise LaunchError(
                    f"no capacity for {self.o.accelerator} in {self.o.zone} after {attempt + 1} "
                    "tries: try --queued (waits in line for capacity), another zone, or later"
                )
            self.say(
                f"no capacity for {self.o.accelerator} in {self.o.zone}: retrying in "
                f"{self.o.retry_wait:g} s ({attempt + 1}/{self.o.create_retries})"
            )
            time.sleep(self.o.retry_wait)

    def _wait_node_ready(self, state: str):
        deadline = time.monotonic() + self.o.wait_timeout
        while True:
            self.say(f"TPU VM {self.o.name} is {state}: waiting for READY")
            time.sleep(self.o.poll_interval)
            node = self.describe_node()
            state = node.get("state", "?") if node else "gone"
            if state == "READY":
                return
            if state not in NODE_COMING:
                raise LaunchError(f"TPU VM {self.o.name} became {state} while starting")
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"TPU VM {self.o.name} still {state} after {self.o.wait_timeout:g} s "
                    "(--wait-timeout)"
                )

    def _ensure_queued(self):
        qr = self.describe_queued()
        state = queued_state(qr) if qr else None
        if state in QUEUED_DEAD or state == "DELETING":
            self.say(
                f"queued resource {self.o.name} is {state}: deleting it and queueing a new one "
                "(--queued)"
            )
            self.may_exist = True
            if self._delete_queued(quiet=False) == "failed":
                raise LaunchError(
                    f"could not delete the {state} queued resource {self.o.name} (see above)"
                )
            state = None
        if state is None:
            self.may_exist = True
            res = self.run(self._queued_create_cmd())
            if res.returncode != 0:
                raise LaunchError(
                    f"could not create queued resource {self.o.name} (see gcloud's message above)"
                )
        else:
            self.may_exist = True
            self.say(f"queued resource {self.o.name} exists ({state}): using it")
        self._wait_active()

    def _wait_active(self):
        start = time.monotonic()
        last = None
        while True:
            qr = self.describe_queued()
            state = queued_state(qr) if qr else "GONE"
            elapsed = time.monotonic() - start
            if state != last:
                self.say(
                    f"queued resource {self.o.name}: {state} - "
                    f"{QUEUED_STATES.get(state, 'state ' + state)} ({elapsed:.0f} s)"
                )
                last = state
            if state == "ACTIVE":
                return
            if state in QUEUED_DEAD or state in ("DELETING", "GONE"):
                detail = failure_detail(qr)
                raise LaunchError(
                    f"queued resource {self.o.name} is {state}{': ' + detail if detail else ''}; "
                    "rerun with --queued to queue a new one"
                )
            if elapsed >= self.o.wait_timeout:
                raise LaunchError(
                    f"queued resource {self.o.name} still {state} after {self.o.wait_timeout:g} s "
                    "(--wait-timeout): it stays in the queue; run the same command again to keep "
                    "waiting, or delete it with "
                    + shlex.join(
                        self.gcloud("queued-resources", "delete", self.o.name, "--force", "--quiet")
                    )
                )
            time.sleep(min(self.o.poll_interval, max(self.o.wait_timeout - elapsed, 0.05)))

    def _delete(self, cmd: list, quiet: bool) -> str:
        """Run a delete command: "deleted", "absent" (there was nothing to delete) or "failed"."""
        res = self.run(cmd, capture=True, echo=not quiet, new_session=quiet)
        if res.returncode == 0:
            return "deleted"
        if NOT_FOUND.search(res.stderr):
            return "absent"
        if not quiet:
            sys.stderr.write(res.stderr)
        return "failed"

    def _delete_node(self, quiet: bool) -> str:
        return self._delete(self.gcloud("tpu-vm", "delete", self.o.name, "--quiet"), quiet)

    def _delete_queued(self, quiet: bool) -> str:
        # --force: also delete the TPU VM the queued resource holds
        return self._delete(
            self.gcloud("queued-resources", "delete", self.o.name, "--force", "--quiet"), quiet
        )

    def delete(self, quiet: bool = False) -> str:
        """Delete the slice: the queued resource (and its VM) when there is one, else the TPU VM."""
        if self.dry:
            if self.queued:
                self.run(
                    self.gcloud("queued-resources", "delete", self.o.name, "--force", "--quiet")
                )
            else:
                self.note(
                    f"(a queued resource named {self.o.name} is deleted instead, with its VM)"
                )
                self.run(self.gcloud("tpu-vm", "delete", self.o.name, "--quiet"))
            return "deleted"
        if not self.queued and self.describe_queued() is not None:
            self.queued = True
        return self._delete_queued(quiet) if self.queued else self._delete_node(quiet)

    def delete_command(self) -> str:
        """The command line that deletes the slice (the queued resource, or the TPU VM)."""
        if self.queued:
            return shlex.join(
                self.gcloud("queued-resources", "delete", self.o.name, "--force", "--quiet")
            )
        return shlex.join(self.gcloud("tpu-vm", "delete", self.o.name, "--quiet"))

    # ---- the launch ------------------------------------------------------------------------------

    def package(self):
        """This checkout at --ref as a tar.gz, and the worker helper, in local files named by the
        launch id."""
        tmp = tempfile.gettempdir()
        archive = os.path.join(tmp, f"lbtrain-{self.launch_id}.tar.gz")
        helper = os.path.join(tmp, f"lbtrain-{self.launch_id}-worker.sh")
        # a read-only look-up, done in --dry-run too: the run records which commit it runs
        rev = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--verify", "--quiet", f"{self.o.ref}^{{commit}}"],
            capture_output=True,
            text=True,
        )
        if rev.returncode != 0:
            raise LaunchError(
                f"--ref {self.o.ref} is not a commit of {ROOT} (the launcher copies a git checkout)"
            )
        self.commit = rev.stdout.strip()
        self.note(
            f"launch {self.launch_id}: the code at {self.o.ref} ({self.commit[:12]}), and the "
            "worker helper:"
        )
        res = self.run(
            ["git", "-C", ROOT, "archive", "--format=tar.gz", f"--output={archive}", self.o.ref],
            capture=True,
        )
        if res.returncode != 0:
            raise LaunchError(
                f"git archive of {ROOT} at --ref {self.o.ref} failed: {last_line(res.stderr)} "
                "(the launcher copies a git checkout)"
            )
        self.tmp_files.append(archive)
        if self.dry:
            with self.lock:
                print(
                    shlex.join(["python3", os.path.abspath(__file__), "--print-worker-script"])
                    + " > "
                    + shlex.quote(helper),
                    flush=True,
                )
        else:
            with open(helper, "w") as f:
                f.write(WORKER_SCRIPT)
            self.tmp_files.append(helper)
            dirty = self.run(
                ["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                capture=True,
                echo=False,
            )
            if dirty.returncode == 0 and dirty.stdout.strip() and self.o.ref == "HEAD":
                self.say(
                    "note: this checkout has uncommitted changes; the workers get the last commit "
                    "only"
                )
        return archive, helper

    def launch(self):
        """Copy the code and worker helper to every worker, install there, and start the run
        detached; raises :class:`LaunchError` when a step fails or a run is already live."""
        self.warn_unshared_workdir()
        archive, helper = self.package()
        self.note("to every worker's home folder, then unpacked and installed there:")
        res = self.run(
            self.gcloud("tpu-vm", "scp", archive, helper, f"{self.o.name}:", "--worker=all")
        )
        if res.returncode != 0:
            raise LaunchError(f"copying the code to {self.o.name}'s workers failed (see above)")
        self.say(
            f"launch {self.launch_id}: installing on every worker (Python {self.o.python} from uv, "
            f"{self.o.jax}, lbtrain[{self.o.extras}]); each worker's log: "
            f"~/lbtrain/launches/{self.launch_id}/install.log"
        )
        setup = 'bash "$HOME/lbtrain-{id}-worker.sh" setup {args}'.format(
            id=self.launch_id,
            args=" ".join(
                quote_inner(w)
                for w in (
                    self.launch_id,
                    self.o.python,
                    self.o.jax,
                    self.o.extras,
                    str(self.o.keep_launches),
                )
            ),
        )
        res = self.run(self.ssh(setup))
        if res.returncode == LIVE_RUN:
            raise LaunchError(self.live_run_message(), code=LIVE_RUN, keep=True)
        if res.returncode != 0:
            raise LaunchError(
                f"the install failed on {self.o.name} (exit {res.returncode}; the worker's lines "
                "above say where)"
            )
        # JAX's own cluster discovery on every host; the commit, for the run's provenance
        env = ["LBTRAIN_DISTRIBUTED_AUTO=1", f"LBTRAIN_SOURCE_COMMIT={self.commit}", *self.o.env]
        # from here on an interrupt stops the run before --delete deletes the slice
        self.run_live = True
        res = self.run(
            self.ssh(self.helper("start", self.launch_id, *env, "--", *self.o.lbtrain_args))
        )
        if res.returncode == LIVE_RUN:
            self.run_live = False
            raise LaunchError(self.live_run_message(), code=LIVE_RUN, keep=True)
        if res.returncode != 0:
            raise LaunchError(
                f"starting the run failed on {self.o.name} (exit {res.returncode}; see above)"
            )
        if not self.dry:
            self.say(
                f"launch {self.launch_id} is running detached on every worker: it continues if "
                "this command ends"
            )

    def live_run_message(self) -> str:
        """The line that refuses a launch because a run is live, with the commands to
        watch or stop it."""
        base = f"scripts/tpu_launch.sh --name {self.o.name} --zone {self.o.zone}"
        base += f" --project {self.o.project}" if self.o.project else ""
        return (
            f"a run is live on {self.o.name} (lines above): nothing was started. Watch it with "
            f"`{base} --follow`, or end it with `{base} --stop`, then launch again"
        )

    def warn_unshared_workdir(self):
        """Warn when a multi-host slice is given a --workdir that is not on GCS."""
        for arg in self.o.lbtrain_args:
            if arg.startswith("--workdir="):
                workdir = arg.split("=", 1)[1]
                if not workdir.startswith("gs://") and (self.workers or 0) > 1:
                    self.say(
                        f"warning: --workdir={workdir} is not a gs:// path: on a multi-host slice "
                        "every host must see the same workdir (lbtrain refuses one its hosts do "
                        "not share)",
                        err=True,
                    )

    def worker_list(self) -> list:
        """The worker indices of the slice (one when the count is not known)."""
        return list(range(self.workers or 1))

    def follow(self, launch_id: str) -> int:
        """Stream every worker's log until the run ends there; the first non-zero exit code, else
        0."""
        cmds = [self.ssh(self.helper("follow", launch_id), worker=w) for w in self.worker_list()]
        if self.dry:
            self.note(
                "every worker's log until the run ends, one such command per worker (--worker=0, "
                "1, ...), in parallel, lines prefixed [wN]:"
            )
            self.show(cmds[0])
            return 0
        self.say(
            f"following launch {launch_id} on {len(cmds)} worker(s); Ctrl-C stops following"
            + (
                " and, with --delete, stops the run and deletes the slice"
                if self.o.delete
                else ", not the run"
            )
        )
        procs = []
        threads = []
        try:
            for w, cmd in zip(self.worker_list(), cmds):
                proc = subprocess.Popen(
                    cmd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                )
                procs.append(proc)
                t = threading.Thread(target=self._pump, args=(proc, f"[w{w}] "), daemon=True)
                t.start()
                threads.append(t)
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(0.2)
            codes = [p.wait() for p in procs]
        except BaseException:
            for p in procs:
                stop_process(p)
            raise
        failed = [(w, c) for w, c in zip(self.worker_list(), codes) if c != 0]
        for w, c in failed:
            self.say(
                f"worker {w}: "
                + ("no such launch there" if c in (2, HELPER_MISSING) else f"exit {c}"),
                err=True,
            )
        if not failed:
            self.say(f"launch {launch_id} ended: exit 0 on every worker")
        return failed[0][1] if failed else 0

    def _pump(self, proc, prefix: str):
        for line in proc.stdout:
            with self.lock:
                sys.stdout.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
                sys.stdout.flush()

    def latest_launch_id(self) -> str:
        """The id of the last launch on worker 0 (``LAUNCH_ID`` under --dry-run);
        raises :class:`LaunchError` if there is none."""
        if self.dry:
            return "LAUNCH_ID"
        res = self.run(self.ssh(self.helper("id"), worker=0), capture=True)
        lid = (
            res.stdout.strip().splitlines()[-1]
            if res.returncode == 0 and res.stdout.strip()
            else ""
        )
        if not re.match(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]+$", lid):
            raise LaunchError(
                f"no launch found on {self.o.name}'s worker 0 {last_line(res.stderr)}".rstrip()
            )
        return lid

    def fetch_logs(self, launch_id: str) -> str:
        """Copy every worker's log of ``launch_id`` into --logs (default
        ``tpu_logs/NAME/ID``); returns that folder."""
        folder = self.o.logs or os.path.join("tpu_logs", self.o.name, launch_id)
        if not self.dry:
            os.makedirs(folder, exist_ok=True)
        else:
            self.note("each worker's log, one command per worker:")
        got = []
        for w in self.worker_list():
            dest = os.path.join(folder, f"worker-{w}.log")
            res = self.run(
                self.gcloud(
                    "tpu-vm",
                    "scp",
                    f"{self.o.name}:lbtrain/launches/{launch_id}/run.log",
                    dest,
                    f"--worker={w}",
                )
            )
            if res.returncode == 0:
                got.append(dest)
            if self.dry:
                break
        if not self.dry:
            if len(got) < len(self.worker_list()):
                raise LaunchError(
                    f"fetched {len(got)} of {len(self.worker_list())} worker logs into {folder}/"
                )
            self.say(f"fetched {len(got)} worker log(s) of launch {launch_id} into {folder}/")
        return folder

    def stop(self) -> int:
        """SIGTERM the live run on every worker (SIGKILL after --stop-grace); returns the
        helper's exit code (0 when nothing was ever launched)."""
        grace = f"{self.o.stop_grace:g}"
        res = self.run(
            self.ssh(self.helper("stop", grace)),
            timeout=None if self.dry else self.o.stop_grace + 120,
        )
        if res.returncode == HELPER_MISSING:
            self.say(f"nothing to stop: no launch on {self.o.name}")
            return 0
        return res.returncode

    # ---- the whole command -----------------------------------------------------------------------

    def main(self) -> int:
        """Do what the flags ask, in order (slice, launch, follow, logs, status, stop,
        delete); returns the exit code."""
        o = self.o
        # --delete alone deletes whatever state the slice is in (a PREEMPTED one too), after a live
        # run ends
        delete_only = o.delete and not (
            o.lbtrain_args
            or o.create
            or o.queued
            or o.follow
            or o.stop
            or o.status
            or o.logs is not None
        )
        state = self.provision(need_ready=not delete_only)
        status = 0
        launched = None
        if o.stop:
            if self.stop() != 0:
                raise LaunchError("--stop did not end the run on every worker (see above)")
        if o.lbtrain_args:
            self.launch()
            launched = self.launch_id
        if o.status:
            self.run(self.ssh(self.helper("status")))
        if o.follow or (o.delete and launched):
            self.following = True
            self.run_live = self.run_live or bool(o.delete)
            status = self.follow(launched or "latest")
            self.following = self.run_live = False
        elif o.delete and state == "READY":
            self.note("wait for a live run to end:")
            self.say(
                f"waiting for any live run on {o.name} to end before deleting it (Ctrl-C: stop it "
                "now, then delete)"
            )
            self.run_live = True
            res = self.run(self.ssh(self.helper("wait")))
            self.run_live = False
            # HELPER_MISSING: nothing was ever launched there
            if res.returncode not in (0, HELPER_MISSING):
                raise LaunchError(
                    f"could not check {o.name} for a live run (exit {res.returncode}): not "
                    f"deleting it; to delete it anyway: {self.delete_command()}",
                    keep=True,
                )
        if o.logs is not None:
            self.fetch_logs(launched or self.latest_launch_id())
        if o.delete:
            self.note("delete the slice:")
            outcome = self.delete()
            if outcome == "failed":
                raise LaunchError(f"could not delete {self.o.name} (see above)")
            if not self.dry:
                self.say(
                    f"deleted {self.kind()} {o.name}"
                    if outcome == "deleted"
                    else f"nothing to delete: no {o.name} in {o.zone}"
                )
            self.may_exist = False
        elif launched and not self.dry:
            base = f"scripts/tpu_launch.sh --name {o.name} --zone {o.zone}"
            self.say(
                f"next: `{base} --follow` (watch), `--logs` (copy the logs here), `--stop` (end "
                "it), `--delete` (delete the slice: it bills until deleted)"
            )
        return status

    def kind(self) -> str:
        """What --delete deletes, in words."""
        return "queued resource (and its TPU VM)" if self.queued else "TPU VM"

    def cleanup(self, why: str) -> None:
        """The --delete trap: after a failure or an interrupt, delete the slice and say so in one
        line."""
        if not (self.o.delete and self.may_exist) or self.dry:
            return
        if self.run_live:
            # stop the run first, so lbtrain checkpoints to its workdir; a second interrupt skips
            # this
            try:
                self.say(
                    f"{why}: stopping the run (SIGTERM; Ctrl-C again to skip), then deleting "
                    f"{self.o.name}",
                    err=True,
                )
                self.run(
                    self.ssh(self.helper("stop", f"{self.o.stop_grace:g}")),
                    capture=True,
                    echo=False,
                    timeout=self.o.stop_grace + 120,
                )
            except (Interrupted, LaunchError):
                pass
        # the deletion itself must finish: later interrupts are ignored, and gcloud runs in its own
        # session
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        try:
            outcome = self.delete(quiet=True)
        except LaunchError:
            outcome = "failed"
        if outcome == "deleted":
            self.say(
                f"--delete: deleted {self.kind()} {self.o.name} after {why}; nothing is left "
                "billing",
                err=True,
            )
        elif outcome == "absent":
            self.say(
                f"--delete: nothing to delete after {why}: no {self.o.name} in {self.o.zone} (if "
                f"an interrupted create still finishes, delete it with: {self.delete_command()})",
                err=True,
            )
        else:
            self.say(
                f"--delete: could NOT delete {self.o.name} after {why}: it still bills; delete it "
                f"with: {self.delete_command()}",
                err=True,
            )

    def remove_tmp(self):
        """Remove the local archive and helper files of this launch."""
        for path in self.tmp_files:
            try:
                os.remove(path)
            except OSError:
                pass


def queued_state(qr: dict) -> str:
    """The state name of a queued resource's description (``STATE_UNSPECIFIED`` if absent)."""
    state = qr.get("state") or {}
    return state.get("state", "STATE_UNSPECIFIED") if isinstance(state, dict) else str(state)


def failure_detail(qr) -> str:
    """The error message of a FAILED queued resource's description (``""`` if none)."""
    if not qr:
        return ""
    data = (qr.get("state") or {}).get("failedData") or {}
    return (data.get("error") or {}).get("message", "") if isinstance(data, dict) else ""


def quote_inner(word: str) -> str:
    """Quote a word of a remote command with double quotes where that is enough, so that the single
    quotes around the whole --command stay readable in printed commands."""
    if re.match(r"^[A-Za-z0-9_=:,./@%+-]+$", word):
        return word
    if not re.search(r'[$`"\\!]', word):
        return f'"{word}"'
    return shlex.quote(word)


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, stripped (``""`` if none)."""
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def stop_process(proc: subprocess.Popen):
    """Terminate ``proc`` if it still runs, and kill it after 5 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv=None) -> int:
    """The command line (``argv``, default ``sys.argv[1:]``) run to its end; returns the exit
    code."""
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    if opts.print_worker_script:
        sys.stdout.write(WORKER_SCRIPT)
        return 0
    launcher = Launcher(opts)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupted)
    try:
        return launcher.main()
    except Interrupted as e:
        name = signal_name(e.signum)
        if launcher.o.delete and launcher.may_exist:
            launcher.cleanup(name)
        elif launcher.run_live or launcher.following:
            launcher.say(
                f"interrupted ({name}): the run continues on the workers; --follow to watch it, "
                "--stop to end it",
                err=True,
            )
        else:
            launcher.say(f"interrupted ({name})", err=True)
        return 128 + e.signum
    except LaunchError as e:
        launcher.say(f"error: {e}", err=True)
        if not e.keep:
            launcher.cleanup("the failure above")
        elif launcher.o.delete and e.code == LIVE_RUN:
            launcher.say(
                f"--delete: not deleting {launcher.o.name}: a run that this command did not start "
                "is live on it",
                err=True,
            )
        return e.code
    except BaseException:
        launcher.cleanup("an unexpected error")
        raise
    finally:
        launcher.remove_tmp()


# The helper every worker runs (bash: the TPU images have it; their Python is too old to matter).
# The launcher writes it next to the code archive; a launch installs it as
# ~/lbtrain/bin/lbtrain-worker.
WORKER_SCRIPT = r"""#!/usr/bin/env bash
# lbtrain worker helper, installed by scripts/tpu_launch.py on every TPU VM worker.
#   setup ID PYTHON JAX EXTRAS KEEP
#       unpack ~/lbtrain-ID.tar.gz into ~/lbtrain/launches/ID/src, install uv, a Python of its own
#       and lbtrain into .../ID/venv (log: .../ID/install.log)
#   start ID [NAME=VALUE]... -- ARGS
#       end stale TPU holders, start `lbtrain ARGS` detached (log: .../ID/run.log)
#   follow ID|latest
#       print the run's log until it ends; exit with the run's exit code
#   stop GRACE
#       SIGTERM to the live run's process group, SIGKILL after GRACE seconds
#   wait | status | id
#       wait for no live run | print the latest launch's state | print its id
# A run is live while the process it started (pid and start time in .../ID/pid) runs and has not
# written .../ID/exit_code. Exit 3 = a run is live (nothing was started).
set -uo pipefail
ROOT="$HOME/lbtrain"
LAUNCHES="$ROOT/launches"
# Where the TPU chips appear (v2-v4: /dev/accel*; v5e and later: /dev/vfio/N) and libtpu's lock
# file.
TPU_DEVICES="${LBTRAIN_TPU_DEVICES:-/dev/accel* /dev/vfio/[0-9]*}"
LIBTPU_LOCKFILE="${LBTRAIN_LIBTPU_LOCKFILE:-/tmp/libtpu_lockfile}"
HOST="$(hostname)"
# other users' processes can hold the TPU: look and end them as root where sudo needs no password
SUDO=""
if [ "$(id -u)" != 0 ] && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi

say() { printf '%s: %s\n' "$HOST" "$*"; }

stat_field() {  # stat_field PID N: field N of /proc/PID/stat (field 2, the name, may hold spaces)
  local stat fields
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  read -r -a fields <<<"${stat##*) }"  # fields 3, 4, ...
  [ "$2" -ge 3 ] && printf '%s\n' "${fields[$(($2 - 3))]}"
}

# running PID: the process exists and is not a zombie (one that has ended holds nothing open)
running() {
  local state
  state=$(stat_field "$1" 3) && [ "$state" != Z ]
}

is_live() {  # is_live DIR
  local pid start
  [ -f "$1/pid" ] && [ ! -f "$1/exit_code" ] || return 1
  read -r pid start <"$1/pid" || return 1
  [ -n "$pid" ] && [ "$(stat_field "$pid" 22)" = "$start" ] && running "$pid"
}

live_launches() {
  local d
  for d in "$LAUNCHES"/*/; do
    [ -d "$d" ] && is_live "${d%/}" && printf '%s\n' "$(basename "$d")"
  done
  return 0
}

launch_dir() {  # launch_dir ID|latest
  local id=$1
  if [ "$id" = latest ]; then
    [ -L "$ROOT/latest" ] || { say "no launch on this worker" >&2; return 2; }
    id=$(basename "$(readlink "$ROOT/latest")")
  fi
  [ -d "$LAUNCHES/$id" ] || { say "no launch $id on this worker" >&2; return 2; }
  printf '%s\n' "$LAUNCHES/$id"
}

# refuse_if_live [ID]: exit 3 when a run is live (and drop launch ID's copied files)
refuse_if_live() {
  local live id pid
  live=$(live_launches)
  [ -z "$live" ] && return 0
  for id in $live; do
    read -r pid _ <"$LAUNCHES/$id/pid"
    say "launch $id is live here (pid $pid, log ~/lbtrain/launches/$id/run.log):" \
      "not starting another"
  done
  [ -n "${1:-}" ] && rm -f "$HOME/lbtrain-$1.tar.gz" "$HOME/lbtrain-$1-worker.sh"
  exit 3
}

# prune KEEP CURRENT: remove launch folders beyond the KEEP newest others; never a live one
prune() {
  local keep=$1 current=$2 n=0 d id
  for d in $(ls -1d "$LAUNCHES"/*/ 2>/dev/null | sort -r); do
    d=${d%/}
    id=${d##*/}
    [ "$id" = "$current" ] && continue
    n=$((n + 1))
    [ "$n" -le "$keep" ] && continue
    is_live "$d" && continue
    rm -rf "$d" && say "pruned old launch $id"
  done
}

install_env() {  # install_env DIR PYTHON JAX EXTRAS
  local dir=$1 python=$2 jax=$3 extras=$4 uv="$HOME/.local/bin/uv" project
  if [ ! -x "$uv" ]; then
    uv=$(command -v uv || true)
  fi
  if [ -z "$uv" ]; then
    echo "installing uv into ~/.local/bin"
    curl -LsSf https://astral.sh/uv/install.sh \
      | env UV_INSTALL_DIR="$HOME/.local/bin" UV_NO_MODIFY_PATH=1 sh || return 1
    uv="$HOME/.local/bin/uv"
  fi
  # a Python that uv downloads and manages, never the image's own (3.10 on the Ubuntu 22.04 images)
  "$uv" venv --python "$python" --python-preference only-managed "$dir/venv" || return 1
  project="$dir/src"
  [ -n "$extras" ] && project="$dir/src[$extras]"
  "$uv" pip install --python "$dir/venv/bin/python" "$jax" -e "$project" || return 1
  # the versions installed (importing jax here would cost seconds per launch; the run imports it
  # first thing)
  "$dir/venv/bin/python" -c 'import sys; from importlib.metadata import version as v
print("python", sys.version.split()[0], "jax", v("jax"), "lbtrain", v("lbtrain"))'
}

cmd_setup() {
  local id=$1 python=$2 jax=$3 extras=$4 keep=$5
  local dir="$LAUNCHES/$id" version rc
  refuse_if_live "$id"
  mkdir -p "$dir/src" "$ROOT/bin" || exit 1
  tar -xzf "$HOME/lbtrain-$id.tar.gz" -C "$dir/src" || {
    say "could not unpack ~/lbtrain-$id.tar.gz"
    exit 1
  }
  rm -f "$HOME/lbtrain-$id.tar.gz"
  # later commands call ~/lbtrain/bin/lbtrain-worker: replace it by a rename, so a copy still being
  # read by a running bash keeps its file
  cp "$HOME/lbtrain-$id-worker.sh" "$ROOT/bin/.lbtrain-worker.$id" \
    && mv -f "$ROOT/bin/.lbtrain-worker.$id" "$ROOT/bin/lbtrain-worker"
  mv -f "$HOME/lbtrain-$id-worker.sh" "$dir/worker.sh"
  printf '%s\n' "$id" >"$dir/launch_id"
  ln -sfn "launches/$id" "$ROOT/latest"
  prune "$keep" "$id"
  install_env "$dir" "$python" "$jax" "$extras" >"$dir/install.log" 2>&1
  rc=$?
  if [ "$rc" != 0 ]; then
    say "install failed (exit $rc); the end of ~/lbtrain/launches/$id/install.log:"
    tail -n 15 "$dir/install.log" | sed "s/^/$HOST:   /"
    exit 1
  fi
  version=$(tail -n 1 "$dir/install.log")
  say "installed launch $id ($version) in ~/lbtrain/launches/$id/venv"
}

# end processes holding the TPU that are not a live run, and remove libtpu's stale lock
clear_stale() {
  local patterns p expr=() pids pid pgid live_pgids="" id cmd
  set -f
  patterns=($TPU_DEVICES)
  set +f
  for p in "${patterns[@]}"; do
    [ ${#expr[@]} -gt 0 ] && expr+=(-o)
    expr+=(-lname "$p")
  done
  for id in $(live_launches); do
    live_pgids="$live_pgids $(cut -d' ' -f1 "$LAUNCHES/$id/pid")"
  done
  pids=$($SUDO find /proc/[0-9]*/fd -maxdepth 1 -type l \( "${expr[@]}" \) -printf '%h\n' \
    2>/dev/null | cut -d/ -f3 | sort -u)
  for pid in $pids; do
    pgid=$(stat_field "$pid" 5) || continue
    case " $live_pgids " in *" $pgid "*) continue ;; esac
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)
    say "ending stale process $pid holding the TPU: $cmd"
    $SUDO kill -TERM "$pid" 2>/dev/null
  done
  for pid in $pids; do
    for _ in $(seq 20); do running "$pid" || break; sleep 0.5; done
    running "$pid" && $SUDO kill -KILL "$pid" 2>/dev/null
  done
  if [ -z "$live_pgids" ] && [ -e "$LIBTPU_LOCKFILE" ]; then
    $SUDO rm -f "$LIBTPU_LOCKFILE" && say "removed a stale $LIBTPU_LOCKFILE"
  fi
  return 0
}

cmd_start() {  # start ID [NAME=VALUE]... -- ARGS...
  local id=$1 dir="$LAUNCHES/$1" envs=() q
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  [ -x "$dir/venv/bin/lbtrain" ] || {
    say "launch $id is not installed here ($dir/venv/bin/lbtrain is missing)"
    exit 1
  }
  refuse_if_live
  clear_stale
  {
    echo '#!/usr/bin/env bash'
    echo "# launch $id, written by the lbtrain worker helper; started detached (setsid nohup) so" \
      "that it outlives"
    echo "# the ssh session. Its process group is the run: a stop sends SIGTERM to all of it."
    echo "cd $(printf '%q' "$dir/src") || exit 1  # configs/ paths are relative to the source"
    echo 'stat=$(cat /proc/$$/stat); rest=${stat##*) }; set -- $rest'
    echo "echo \"\$\$ \${20}\" >$(printf '%q' "$dir/pid.tmp")" \
      "&& mv $(printf '%q' "$dir/pid.tmp") $(printf '%q' "$dir/pid")"
    for q in "${envs[@]}"; do echo "export $(printf '%q' "$q")"; done
    echo "log=$(printf '%q' "$dir/run.log")"
    printf 'args=('; [ $# -gt 0 ] && printf '%q ' "$@"; echo ')'
    echo 'echo "== launch '"$id"' on $(hostname), $(date -u +%FT%TZ):' \
      'lbtrain ${args[*]} ==" >>"$log"'
    echo '# trapped (not ignored), so lbtrain keeps the default handlers; bash runs the trap when' \
      'lbtrain has ended'
    echo "trap 'echo \"== \$(date -u +%FT%TZ): signal received, lbtrain is stopping ==\"" \
      ">>\"\$log\"' TERM INT HUP"
    echo "$(printf '%q' "$dir/venv/bin/lbtrain")"' "${args[@]}" >>"$log" 2>&1 </dev/null'
    echo 'rc=$?'
    echo 'echo "== $(date -u +%FT%TZ): lbtrain exited with $rc ==" >>"$log"'
    echo "echo \"\$rc\" >$(printf '%q' "$dir/exit_code.tmp")" \
      "&& mv $(printf '%q' "$dir/exit_code.tmp") $(printf '%q' "$dir/exit_code")"
    echo 'exit "$rc"'
  } >"$dir/run.sh"
  rm -f "$dir/pid" "$dir/exit_code"
  : >"$dir/run.log"
  setsid nohup bash "$dir/run.sh" >/dev/null 2>&1 </dev/null &
  for _ in $(seq 100); do [ -f "$dir/pid" ] && break; sleep 0.1; done
  [ -f "$dir/pid" ] || { say "the run did not start (no $dir/pid after 10 s)"; exit 1; }
  ln -sfn "launches/$id" "$ROOT/latest"
  say "started launch $id (pid $(cut -d' ' -f1 "$dir/pid")); log: ~/lbtrain/launches/$id/run.log"
}

cmd_follow() {
  local dir pid start rc
  dir=$(launch_dir "$1") || exit 2
  for _ in $(seq 100); do [ -f "$dir/pid" ] && break; sleep 0.1; done
  [ -f "$dir/pid" ] || { say "launch ${dir##*/} was installed but never started"; exit 1; }
  read -r pid start <"$dir/pid"
  if is_live "$dir"; then
    tail -n +1 -F --pid="$pid" -s 0.5 "$dir/run.log" 2>/dev/null
  else
    cat "$dir/run.log"
  fi
  for _ in $(seq 20); do [ -f "$dir/exit_code" ] && break; sleep 0.1; done
  rc=$(cat "$dir/exit_code" 2>/dev/null) || rc=""
  if [ -z "$rc" ]; then
    say "launch ${dir##*/} ended without recording an exit code (killed)"
    exit 137
  fi
  exit "$rc"
}

cmd_stop() {  # stop GRACE
  local grace=${1:-180} id dir pid ticks n any=0
  for id in $(live_launches); do
    any=1
    dir="$LAUNCHES/$id"
    read -r pid _ <"$dir/pid"
    say "stopping launch $id: SIGTERM to its processes (lbtrain checkpoints and exits)"
    kill -TERM -- "-$pid" 2>/dev/null
    ticks=$(awk -v g="$grace" 'BEGIN { printf "%d", g * 2 }')
    n=0
    while is_live "$dir" && [ "$n" -lt "$ticks" ]; do sleep 0.5; n=$((n + 1)); done
    if is_live "$dir"; then
      say "launch $id still running after $grace s: SIGKILL"
      kill -KILL -- "-$pid" 2>/dev/null
      sleep 0.5
      [ -f "$dir/exit_code" ] || {
        echo 137 >"$dir/exit_code"
        echo "== killed by stop after $grace s ==" >>"$dir/run.log"
      }
    fi
    say "launch $id ended: exit $(cat "$dir/exit_code" 2>/dev/null)"
  done
  [ "$any" = 1 ] || say "no live run"
  return 0
}

cmd_wait() {
  local live
  while live=$(live_launches) && [ -n "$live" ]; do sleep 5; done
  say "no live run"
}

cmd_status() {
  local dir id state
  dir=$(launch_dir latest) || exit 0
  id=${dir##*/}
  if is_live "$dir"; then state="running (pid $(cut -d' ' -f1 "$dir/pid"))"
  elif [ -f "$dir/exit_code" ]; then state="ended: exit $(cat "$dir/exit_code")"
  elif [ -f "$dir/pid" ]; then state="ended without an exit code (killed)"
  elif [ -x "$dir/venv/bin/lbtrain" ]; then state="installed, not started"
  else state="not installed (see ~/lbtrain/launches/$id/install.log)"
  fi
  say "launch $id: $state; log ~/lbtrain/launches/$id/run.log"
}

verb=${1:-}
[ $# -gt 0 ] && shift
case "$verb" in
  setup) cmd_setup "$@" ;;
  start) cmd_start "$@" ;;
  follow) cmd_follow "${1:-latest}" ;;
  stop) cmd_stop "$@" ;;
  wait) cmd_wait ;;
  status) cmd_status ;;
  id) dir=$(launch_dir latest) || exit 2; printf '%s\n' "${dir##*/}" ;;
  *) echo "usage: lbtrain-worker setup|start|follow|stop|wait|status|id ..." >&2; exit 2 ;;
esac
"""


if __name__ == "__main__":
    sys.exit(main())
