"""The test side of the fake: ``FakeSlice(folder)`` writes the wrappers, the first state, and reads
back what the calls did."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys

from .runs import kill_group, live_pid_files, preempt
from .state import STATE_VARIABLE, load_state, locked, save_state, worker_home


def wrapper(tests: str, tool: str) -> str:
    """A ``/bin/sh`` script that runs one call of the fake as ``tool``, on this interpreter, with
    ``tests`` (the folder that holds ``support``) first on its path: the launcher and the workers
    that run it know nothing of this test's ``sys.path``."""
    code = (
        f"import sys; sys.path.insert(0, {tests!r}); "
        "from support.fake_gcloud.cli import main; sys.exit(main())"
    )
    return f'#!/bin/sh\nexec {sys.executable} -c {shlex.quote(code)} {tool} "$@"\n'


class FakeSlice:
    """The test side: folders, wrappers and state of one fake project."""

    def __init__(self, folder: str, workers: int = None, **settings):
        # here, not above: the fake's own calls (cli.py) run without the repository on their path
        from experiments import ROOT

        self.folder = os.path.abspath(folder)
        self.bin = os.path.join(self.folder, "bin")  # first on the launcher's PATH: gcloud
        # first on every worker's PATH: curl
        self.worker_bin = os.path.join(self.folder, "worker_bin")
        for d in (self.bin, self.worker_bin, os.path.join(self.folder, "workers")):
            os.makedirs(d, exist_ok=True)
        for folder_, tool in ((self.bin, "gcloud"), (self.worker_bin, "curl"), (self.folder, "uv")):
            path = os.path.join(folder_, tool)
            with open(path, "w") as f:
                f.write(wrapper(os.path.join(ROOT, "tests"), tool))
            os.chmod(path, 0o755)
        state = dict(
            workers=workers,
            nodes={},
            queued={},
            capacity_failures=0,
            uv_fail=False,
            program=None,
            queued_states=["WAITING_FOR_RESOURCES", "PROVISIONING", "ACTIVE"],
            worker_env={},
            python=sys.executable,
            accounts=[{"account": "tester@example.com", "status": "ACTIVE"}],
        )
        state.update(settings)
        save_state(self.folder, state)

    @property
    def env(self) -> dict:
        """The launcher's environment: this fake first on PATH."""
        return dict(
            os.environ,
            PATH=self.bin + os.pathsep + os.environ["PATH"],
            **{STATE_VARIABLE: self.folder},
        )

    def state(self) -> dict:
        return load_state(self.folder)

    def update(self, **settings):
        with locked(self.folder):
            state = load_state(self.folder)
            state.update(settings)
            save_state(self.folder, state)

    def preempt(self, name: str, grace: float = 30.0):
        """Take spot VM ``name`` back: its runs get SIGTERM, then it is PREEMPTED."""
        preempt(self.folder, name, grace)

    def pause(self, name: str):
        """Freeze the live runs on VM ``name`` where they are (SIGSTOP to their process groups): a
        VM that makes no progress, its runs still live to every check, until :meth:`resume`."""
        for pid_file in live_pid_files(self.folder, name):
            kill_group(pid_file, signal.SIGSTOP)

    def resume(self, name: str):
        """Let the runs :meth:`pause` froze on VM ``name`` go on (SIGCONT)."""
        for pid_file in live_pid_files(self.folder, name):
            kill_group(pid_file, signal.SIGCONT)

    def set_node_state(self, name: str, node_state: str):
        with locked(self.folder):
            state = load_state(self.folder)
            state["nodes"][name]["state"] = node_state
            save_state(self.folder, state)

    def calls(self, tool: str = "gcloud") -> list:
        path = os.path.join(self.folder, "calls.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return [r["argv"] for r in rows if r["tool"] == tool]

    def home(self, name: str, worker: int) -> str:
        return worker_home(self.folder, name, worker)

    def end_all_runs(self):
        """End every run any worker of any node started (test teardown)."""
        for root, _dirs, files in os.walk(os.path.join(self.folder, "workers")):
            if "pid" in files and os.path.basename(os.path.dirname(root)) == "launches":
                kill_group(os.path.join(root, "pid"), signal.SIGKILL)
