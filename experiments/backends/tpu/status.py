"""The slice's status for programs (``--status --json``, or :func:`slice_status`): whether it exists
and in which state, its type, the run live on it (or the latest launch) and the commit installed
there; what a sweep executor polls to keep a pool of slices busy."""

from __future__ import annotations

import json

from .accelerators import accelerator
from .common import HELPER_MISSING, STATUS_MARKER, LaunchError, last_line
from .tpuvm import TpuVm, queued_state

LAUNCH_FIELDS = ("launch_id", "state", "exit_code", "commit", "workdir")


class Status(TpuVm):
    """Describe the slice and ask every worker's helper about its launches."""

    def slice_status(self) -> dict:
        """The slice as one JSON-ready dict (shape: docs/cloud_tpu.md, "Status for programs")."""
        node = self.describe_node()
        qr = self.describe_queued()
        accel = (node or {}).get("acceleratorType") or None
        workers = len((node or {}).get("networkEndpoints") or []) or None
        out = {
            "name": self.o.name,
            "zone": self.o.zone,
            "project": self.o.project,
            "exists": node is not None,
            "state": node.get("state", "STATE_UNSPECIFIED") if node else "ABSENT",
            "queued_resource": queued_state(qr) if qr else None,
            "accelerator": accel,
            "workers": workers,
            "devices": _devices(accel),
            "live": None,  # unknown unless the workers answer
            "launch": None,
            "installed_commit": None,
            "per_worker": [],
            "error": None,
        }
        if out["state"] == "READY":
            self._ask_workers(out)
        return out

    def _ask_workers(self, out: dict):
        """Fill ``live``, ``launch``, ``installed_commit`` and ``per_worker`` from the helper's
        ``status --json`` line on every worker."""
        try:
            res = self.run(
                self.ssh(self.helper("status", "--json")), capture=True, echo=False, timeout=300
            )
        except LaunchError as e:  # a slice that does not answer is a state to report, too
            out["error"] = str(e)
            return
        answers = []
        for line in res.stdout.splitlines():
            if line.startswith(STATUS_MARKER + " "):
                try:
                    answers.append(json.loads(line[len(STATUS_MARKER) + 1 :]))
                except ValueError:
                    pass
        out["per_worker"] = answers
        if not answers and res.returncode == HELPER_MISSING:
            # nothing was ever launched there: no helper, no launch, no environment
            out["live"] = False
            return
        if res.returncode != 0 or len(answers) < (out["workers"] or 1):
            out["error"] = (
                f"{len(answers)} of {out['workers'] or 1} worker(s) answered (exit "
                f"{res.returncode}): {last_line(res.stderr) or 'no message'}"
            )
        if not answers:
            return
        out["live"] = any(a.get("live") for a in answers)
        # the live launch when there is one, else the latest (worker 0's view when they agree)
        first = next((a for a in answers if a.get("live")), answers[0])
        if first.get("launch_id"):
            out["launch"] = {k: first.get(k) for k in LAUNCH_FIELDS}
        installed = {a.get("installed_commit") for a in answers}
        out["installed_commit"] = installed.pop() if len(installed) == 1 else None

    def print_status(self) -> int:
        """--status --json: print the slice's status as one JSON line (the commands under
        --dry-run)."""
        if self.dry:
            self.note("the slice, its queued resource, then every worker's helper:")
            self.run(self.gcloud("tpu-vm", "describe", self.o.name, "--format=json"))
            self.run(self.gcloud("queued-resources", "describe", self.o.name, "--format=json"))
            self.run(self.ssh(self.helper("status", "--json")))
            return 0
        print(json.dumps(self.slice_status()), flush=True)
        return 0


def _devices(accel):
    """The JAX devices of an accelerator type, or ``None`` for one not in the table."""
    try:
        return accelerator(accel).devices if accel else None
    except LaunchError:
        return None


def slice_status(name: str, zone: str, project: str = None) -> dict:
    """The status of slice ``name`` in ``zone`` (what ``--status --json`` prints) for a program
    that imports this package; raises :class:`LaunchError` when gcloud cannot describe it."""
    from .cli import parse_args

    argv = ["--name", name, "--zone", zone, "--status", "--json"]
    return Status(parse_args(argv + (["--project", project] if project else []))).slice_status()
