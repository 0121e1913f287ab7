"""A fake ``gcloud`` that plays a Cloud TPU VM slice on this machine, for the launcher's tests
(tests/backends/tpu/test_tpu_launch.py, test_tpu_status.py, tests/executors/test_tpu.py); its own
tests are tests/backends/tpu/test_fake_gcloud.py.

``FakeSlice(folder)`` (slice.py) writes ``gcloud`` (and the ``curl`` a worker calls to install uv)
as small wrappers that run cli.py, and keeps the slice's state in ``folder/state.json`` (state.py).
What it plays, with the flags of the gcloud reference the launcher uses (flags.py: an unknown flag
is an error, as in gcloud), one module each:

* nodes.py, ``compute tpus tpu-vm create | describe | delete``: a node with as many workers (TPU
  VMs) as its accelerator type has (accelerators.py: Google's tables, written apart from the
  launcher's), or ``workers`` when a test sets it; worker i is the folder
  ``folder/workers/NAME/wI``, its HOME, with one file ``dev/accelN`` per chip it holds. A type
  outside those rules (v2-v5p: whole 4-chip hosts up to a Pod or the largest slice, not checked
  against Google's 3D topologies; v5e / v6e: the listed shapes) is refused (INVALID_ARGUMENT).
* connect.py, ``tpu-vm ssh | scp``: ``ssh --worker=all|N --command CMD`` runs ``bash -c CMD`` in
  the workers' folders, one local process per worker, all at once, with a clean environment (as on
  a fresh VM) in which JAX on CPU sees the worker's share of the slice's devices (``XLA_FLAGS``),
  plus the worker's ``worker_env``; it exits with the first non-zero status. ``scp`` copies into /
  out of those folders.
* runs.py: ``delete`` ends the node's runs (their recorded process groups), as deleting a VM does.
  Preemption, a hook only tests use: ``FakeSlice.preempt(name)`` or ``gcloud fake preempt NAME
  --zone=Z [--grace=SECONDS]``. The node goes STOPPING, its live runs' process groups get SIGTERM
  (SIGKILL after the grace period, default 30 s, as a spot VM's shutdown gives), then the node is
  PREEMPTED (a queued resource holding it: SUSPENDED). ``FakeSlice.pause(name)`` freezes a node's
  live runs (SIGSTOP to their process groups) until ``FakeSlice.resume(name)``: a test orders
  events around a run that would otherwise race them.
* queued.py, ``compute tpus queued-resources create | describe | delete`` (``alpha`` for
  ``--best-effort``): a new queued resource walks through ``queued_states``, one state per
  describe; at ACTIVE its node exists.
* Capacity: the first ``capacity_failures`` plain creates fail with RESOURCE_EXHAUSTED.
* auth.py, ``auth list [--filter=status:ACTIVE] [--format=json|value(account)]``: the ``accounts``
  of the state (one active account unless a test empties it), as gcloud prints them.
* install.py: ``curl -LsSf https://astral.sh/uv/install.sh`` prints an installer that puts a fake
  ``uv`` in ``$UV_INSTALL_DIR``; ``uv venv`` / ``uv pip install`` build ``venv/bin/python`` and
  ``venv/bin/lbtrain`` on this test's own interpreter (lbtrain from the unpacked source, or
  ``program`` instead when set), and fail when ``uv_fail`` is set.

Every call is appended to ``folder/calls.jsonl`` (gcloud, curl, uv), so a test can check what ran.
"""

from .slice import FakeSlice

__all__ = ["FakeSlice"]
