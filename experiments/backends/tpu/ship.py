"""Shipping the code: this checkout at --ref as a `git archive` and the worker helper (worker.sh,
next to this file), copied to every worker, unpacked and installed there; then the run started.

The helper is bash (the TPU images have it; their Python is too old to matter). The launcher writes
it next to the code archive; a launch installs it as ~/lbtrain/bin/lbtrain-worker. The environment
(~/lbtrain/env) is installed once per commit: a launch of the commit it holds reuses it."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile

from .base import Base
from .common import ENTRY, LIVE_RUN, ROOT, LaunchError, last_line, quote_inner

WORKER_HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.sh")


def worker_script() -> str:
    """The text of the helper every worker runs (what --print-worker-script prints)."""
    with open(WORKER_HELPER, encoding="utf-8") as f:
        return f.read()


class Ship(Base):
    """Package the code, copy it to every worker, install it there and start the run."""

    def package(self):
        """This checkout at --ref as a tar.gz, and the worker helper, in local files named by the
        launch id."""
        tmp = tempfile.gettempdir()
        archive = os.path.join(tmp, f"lbtrain-{self.launch_id}.tar.gz")
        helper = os.path.join(tmp, f"lbtrain-{self.launch_id}-worker.sh")
        self.commit = self._commit()
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
            self._show_helper_command(helper)
        else:
            self._write_helper(helper)
        return archive, helper

    def _commit(self) -> str:
        """The commit --ref names: a read-only look-up, done in --dry-run too (the run records which
        commit it runs)."""
        rev = subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--verify", "--quiet", f"{self.o.ref}^{{commit}}"],
            capture_output=True,
            text=True,
        )
        if rev.returncode != 0:
            raise LaunchError(
                f"--ref {self.o.ref} is not a commit of {ROOT} (the launcher copies a git checkout)"
            )
        return rev.stdout.strip()

    def _show_helper_command(self, helper: str):
        """--dry-run: the command that writes the worker helper to ``helper``."""
        with self.lock:
            print(
                shlex.join(["python3", ENTRY, "--print-worker-script"])
                + " > "
                + shlex.quote(helper),
                flush=True,
            )

    def _write_helper(self, helper: str):
        """Write the worker helper to ``helper``; say so when the workers will not get uncommitted
        changes of this checkout."""
        with open(helper, "w") as f:
            f.write(worker_script())
        self.tmp_files.append(helper)
        dirty = self.run(
            ["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
            capture=True,
            echo=False,
        )
        if dirty.returncode == 0 and dirty.stdout.strip() and self.o.ref == "HEAD":
            self.say(
                "note: this checkout has uncommitted changes; the workers get the last commit only"
            )

    def launch(self):
        """Copy the code and worker helper to every worker, install there, and start the run
        detached; raises :class:`LaunchError` when a step fails or a run is already live."""
        self.warn_unshared_workdir()
        archive, helper = self.package()
        self._copy(archive, helper)
        self._install()
        self._start()

    def _copy(self, archive: str, helper: str):
        """The code archive and the helper to every worker's home folder."""
        self.note("to every worker's home folder, then unpacked and installed there:")
        res = self.run(
            self.gcloud("tpu-vm", "scp", archive, helper, f"{self.o.name}:", "--worker=all")
        )
        if res.returncode != 0:
            raise LaunchError(f"copying the code to {self.o.name}'s workers failed (see above)")

    def _install(self):
        """Unpack and install on every worker (the helper's setup), where ~/lbtrain/env does not
        hold this commit installed with the same Python, JAX and extras already; refused while a
        run is live."""
        self.say(
            f"launch {self.launch_id}: setting up every worker: the install (Python "
            f"{self.o.python} from uv, {self.o.jax}, lbtrain[{self.o.extras}] into ~/lbtrain/env) "
            f"is skipped where it holds commit {self.commit[:12]} with these already; each "
            f"worker's log: ~/lbtrain/launches/{self.launch_id}/install.log"
        )
        setup = 'bash "$HOME/lbtrain-{id}-worker.sh" setup {args}'.format(
            id=self.launch_id,
            args=" ".join(
                quote_inner(w)
                for w in (
                    self.launch_id,
                    self.commit,
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

    def _start(self):
        """Start the run detached on every worker (the helper's start)."""
        # JAX's own cluster discovery on every host of a multi-host slice (one host is one JAX
        # process: nothing to discover); the commit, for the run's provenance
        auto = [] if self.workers == 1 else ["LBTRAIN_DISTRIBUTED_AUTO=1"]
        env = [*auto, f"LBTRAIN_SOURCE_COMMIT={self.commit}", *self.o.env]
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
