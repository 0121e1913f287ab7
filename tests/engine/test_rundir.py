"""The run directory layer on local folders and the GCS emulator: atomic JSON, the write probe's
one-line errors (real permission denial, a real full file system, a file in the way, a missing or
unreachable bucket, a missing extra), the workdir lock (live owner, dead owner, racing processes,
heartbeat) and data-derived artefacts with provenance."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from etils import epath
from support.storage_faults import run_without_file_permission_override, tiny_tmpfs

from experiments import ROOT
from lbtrain import rundir
from lbtrain.errors import StorageError
from lbtrain.rundir.lockstore import GcsStore, LocalStore


def workdir_for(where, tmp_path, request) -> str:
    return f"{request.getfixturevalue('gcs').root}/run" if where == "gcs" else str(tmp_path / "run")


# ------------------------------------------------------------------------------------------ JSON


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_json_round_trip_and_replace(where, tmp_path, request):
    wd = workdir_for(where, tmp_path, request)
    p = f"{wd}/config.json"
    assert rundir.read_json(p, default="missing") == "missing"
    rundir.write_json(p, {"a": 1, "nested": {"b": [1, 2]}})
    rundir.write_json(p, {"a": 2})
    assert rundir.read_json(p) == {"a": 2}
    # no temporary file left behind
    assert [q.name for q in epath.Path(wd).iterdir()] == ["config.json"]
    rundir.write_json(f"{wd}/other.json", {"x": 1}, is_writer=False)
    assert not epath.Path(f"{wd}/other.json").exists()


def test_local_write_is_atomic_under_a_full_disk(tmp_path):
    with tiny_tmpfs(tmp_path / "small", "64k") as mount:
        p = mount / "results.json"
        rundir.write_json(p, {"ok": True})
        with pytest.raises(StorageError) as err:
            rundir.write_json(p, {"big": "x" * 200_000})
        assert str(err.value).startswith(f"cannot write {p} (no space left on the device): ")
        assert json.loads(p.read_text()) == {"ok": True}  # the previous version is intact
        assert sorted(os.listdir(mount)) == ["results.json"]


def test_unparsable_json_is_one_line(tmp_path):
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(
        StorageError, match=r"results.json is not valid JSON .*: remove it or restore it"
    ):
        rundir.read_json(tmp_path / "results.json")


# ------------------------------------------------------------------------------------ write probe


def test_probe_permission_denied_names_the_path(tmp_path):
    root_only = tmp_path / "read-only-folder"
    root_only.mkdir()
    os.chmod(root_only, 0o555)
    done = run_without_file_permission_override(
        textwrap.dedent(f"""
        from lbtrain import rundir
        from lbtrain.errors import StorageError
        try:
            rundir.check_writable({str(root_only / "run")!r})
        except StorageError as e:
            print(e)
    """)
    )
    assert done.stdout.strip() == (
        f"workdir {root_only / 'run'} is not writable (permission denied): free space, "
        "fix permissions, or choose another --workdir"
    ), done.stderr[-2000:]


def test_probe_full_disk_names_the_path(tmp_path):
    with tiny_tmpfs(tmp_path / "small", "4k") as mount:
        (mount / "filler").write_bytes(b"x" * 4096)
        with pytest.raises(StorageError) as err:
            rundir.check_writable(mount / "run")
    assert str(err.value) == (
        f"workdir {mount / 'run'} is not writable (no space left on the device): free space, "
        "fix permissions, or choose another --workdir"
    )


def test_probe_file_in_the_way(tmp_path):
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(
        StorageError,
        match=r"a-file/run is not writable \(a file stands where a folder is expected\)",
    ):
        rundir.check_writable(tmp_path / "a-file" / "run")


def test_probe_missing_bucket(gcs):
    with pytest.raises(StorageError) as err:
        rundir.check_writable("gs://no-such-bucket-here/run")
    message = str(err.value)
    assert message.startswith("workdir gs://no-such-bucket-here/run is not writable (")
    assert message.endswith(
        "create the bucket, check its name and your credentials, or choose another --workdir"
    )
    assert "\n" not in message


@pytest.mark.slow  # gcsfs retries a refused connection for ~30 s before giving up
def test_probe_unreachable_bucket():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]  # bound, never listening: connections are refused
    env = {
        "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}",
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    }
    code = (
        "from lbtrain import rundir\nfrom lbtrain.errors import StorageError\n"
        "try:\n    rundir.check_writable('gs://bucket/run')\nexcept StorageError as e:\n    "
        "print(e)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT, **env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    closed.close()
    out = done.stdout.strip()
    assert out.startswith("workdir gs://bucket/run is not writable (") and "127.0.0.1" in out, (
        done.stderr[-2000:]
    )
    assert len(out.splitlines()) == 1


def test_missing_cloud_extra_says_what_to_install():
    code = (
        "import sys\nsys.modules['gcsfs'] = None\nfrom lbtrain import rundir\n"
        "from lbtrain.errors import StorageError\n"
        "try:\n    rundir.path('gs://bucket/run')\nexcept StorageError as e:\n    print(e)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == (
        "gs://bucket/run is a Cloud Storage path and gcsfs is not installed: "
        "pip install '.[gcs]' in the lbtrain checkout"
    ), done.stderr[-2000:]


def test_other_schemes_are_refused():
    with pytest.raises(StorageError, match="s3://b/run: only local paths and gs:// are supported"):
        rundir.path("s3://b/run")


# ------------------------------------------------------------------------------------------ lock


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def lock_record(host, pid, heartbeat) -> dict:
    return {
        "host": host,
        "pid": pid,
        "started": heartbeat,
        "heartbeat": heartbeat,
        "started_utc": "2026-01-01T00:00:00Z",
        "token": "planted",
    }


def plant_lock(wd, host, pid, heartbeat):
    rundir.write_json(f"{wd}/run.lock", lock_record(host, pid, heartbeat))


def store_of(wd, where):
    path = epath.Path(f"{wd}/run.lock")
    return GcsStore(path) if where == "gcs" else LocalStore(path)


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_live_owner_refuses_a_second_run(where, tmp_path, request):
    wd = workdir_for(where, tmp_path, request)
    with rundir.lock(wd, heartbeat_s=0):
        owner = rundir.read_json(f"{wd}/run.lock")
        with pytest.raises(rundir.WorkdirLocked) as err:
            rundir.lock(wd)
    assert str(err.value) == (
        f"workdir {wd} is in use by another run (host {socket.gethostname()}, pid {os.getpid()}, "
        f"started {owner['started_utc']}; lock {wd}/run.lock): wait for it to finish, stop it, or "
        "choose another --workdir"
    )
    assert not epath.Path(f"{wd}/run.lock").exists()  # released
    rundir.lock(wd, heartbeat_s=0).release()  # and free again


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_dead_owner_is_taken_over_with_a_warning(where, tmp_path, request, capsys):
    wd = workdir_for(where, tmp_path, request)
    pid = dead_pid()
    plant_lock(wd, socket.gethostname(), pid, time.time())
    held = rundir.lock(wd, heartbeat_s=0)
    assert (
        f"lbtrain: warning: taking over {wd}/run.lock: its owner (host {socket.gethostname()}, "
        f"pid {pid}, started 2026-01-01T00:00:00Z) is dead (process {pid} on this host is gone)"
        in capsys.readouterr().err
    )
    assert rundir.read_json(f"{wd}/run.lock")["pid"] == os.getpid()
    held.release()


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_a_late_taker_of_a_dead_lock_never_removes_the_winners(where, tmp_path, request, capsys):
    """Two runs judged the same dead lock; the first took it over. The second, acting on what it
    read, must fail without touching the winner's lock (a takeover is one conditional rewrite:
    the GCS emulator ignores preconditions on a delete, so remove-then-create lost it there)."""
    wd = workdir_for(where, tmp_path, request)
    plant_lock(wd, socket.gethostname(), dead_pid(), time.time())
    late = rundir.RunLock(wd, heartbeat_s=0)
    late.store = store_of(wd, where)
    data, stale = late.store.read()  # what the late run read and judged dead
    winner = rundir.lock(wd, heartbeat_s=0)
    late.owner = {"host": socket.gethostname(), "pid": os.getpid(), "token": "late"}
    assert late._take_over_if_dead(json.loads(data), stale) is None
    assert rundir.read_json(f"{wd}/run.lock")["token"] == winner.owner["token"]
    with pytest.raises(rundir.WorkdirLocked, match=f"pid {os.getpid()},"):
        rundir.lock(wd, heartbeat_s=0)  # and the winner, alive, is judged so
    winner.release()
    assert not epath.Path(f"{wd}/run.lock").exists()
    capsys.readouterr()


def test_other_host_is_judged_by_its_heartbeat(tmp_path, capsys):
    wd = str(tmp_path)
    plant_lock(wd, "another-host", 1, time.time() - 5)
    with pytest.raises(rundir.WorkdirLocked, match="host another-host, pid 1"):
        rundir.lock(wd, stale_after_s=600)
    plant_lock(wd, "another-host", 1, time.time() - 1000)
    rundir.lock(wd, heartbeat_s=0, stale_after_s=600).release()
    assert "is dead (its heartbeat is 1000 s old (> 600 s))" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_heartbeat_refreshes_and_detects_a_takeover(where, tmp_path, request, capsys):
    wd = workdir_for(where, tmp_path, request)
    held = rundir.lock(wd, heartbeat_s=0.2)
    first = rundir.read_json(f"{wd}/run.lock")["heartbeat"]
    time.sleep(1.0)
    assert rundir.read_json(f"{wd}/run.lock")["heartbeat"] > first
    held.check()
    # another run takes the lock over as a run does: one conditional rewrite of what it read (a
    # blind write could land between a beat's read and its rewrite, and be overwritten by it)
    store, record = store_of(wd, where), json.dumps(lock_record("another-host", 1, time.time()))
    while store.replace_if(record.encode(), store.read()[1]) is None:
        pass  # a beat came between our read and our rewrite: read again
    deadline = time.time() + 30  # the next beat (0.2 s) notices; a loaded machine may delay it
    while not held.lost and time.time() < deadline:
        time.sleep(0.05)
    assert held.lost
    with pytest.raises(rundir.WorkdirLocked, match="was taken over by another run"):
        held.check()
    held.release()
    assert rundir.read_json(f"{wd}/run.lock")["host"] == "another-host"  # not removed by the loser


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_a_deleted_lock_or_workdir_is_noticed_and_released_quietly(where, tmp_path, request):
    """What the loop asks at each evaluation and checkpoint (lock.problem()): None while the run
    holds its workdir; a WorkdirVanished line once its lock file or the whole folder is deleted
    (the heartbeat then stops without calling it a takeover); a takeover once another run's lock
    stands there. Releasing a lock whose folder is gone raises nothing."""
    import shutil

    wd = workdir_for(where, tmp_path, request)
    held = rundir.lock(wd, heartbeat_s=0.1)
    assert held.problem() is None
    rundir.write_json(f"{wd}/config.json", {})  # on GCS the folder is its objects: keep one
    rundir.path(f"{wd}/run.lock").unlink()
    time.sleep(0.5)  # a few beats: none may call it a takeover
    assert not held.lost
    problem = held.problem()
    assert isinstance(problem, rundir.WorkdirVanished) and "run.lock was deleted" in str(problem)
    if where == "local":  # the whole folder (GCS has no folder of its own to delete)
        shutil.rmtree(wd)
        assert "workdir " + wd + " was deleted while this run trained" in str(held.problem())
        rundir.path(wd).mkdir()
    # a second run took the workdir (nothing stopped it): its token is not ours
    other = rundir.lock(wd, heartbeat_s=0)
    assert isinstance(held.problem(), rundir.WorkdirLocked)
    held.release()
    other.release()
    shutil.rmtree(wd, ignore_errors=True)
    held = rundir.lock(str(tmp_path / "gone"), heartbeat_s=0)
    shutil.rmtree(tmp_path / "gone")
    held.release()  # nothing to remove, and no error


def test_non_writer_takes_no_lock(tmp_path):
    with rundir.lock(tmp_path, is_writer=False):
        assert not (tmp_path / "run.lock").exists()


RACER = textwrap.dedent("""
    import os, sys, time
    from lbtrain import rundir
    workdir, start, tally = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    time.sleep(max(start - time.time(), 0))

    def attempted():  # every racer marks its attempt; the winner holds until all four have tried
        open(os.path.join(tally, str(os.getpid())), "w").close()

    try:
        held = rundir.lock(workdir, heartbeat_s=0)
    except rundir.WorkdirLocked as e:
        attempted()
        print("lost", e, flush=True)
    else:
        attempted()
        deadline = time.time() + 90
        while len(os.listdir(tally)) < 4 and time.time() < deadline:
            time.sleep(0.05)
        print("won", flush=True)
        held.release()
""")


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "gcs"])
@pytest.mark.parametrize("previous", ["none", "dead"])
def test_racing_processes_exactly_one_wins(where, previous, tmp_path, request):
    wd = workdir_for(where, tmp_path, request)
    extra = request.getfixturevalue("gcs").env if where == "gcs" else {}
    if previous == "dead":
        plant_lock(wd, socket.gethostname(), dead_pid(), time.time())
    start = time.time() + 4  # all four start their attempt at about the same instant
    tally = tmp_path / "attempts"  # on a slow machine a racer may start late: the winner waits
    tally.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, wd, str(start), str(tally)],
            cwd=ROOT,
            text=True,
            env=dict(os.environ, PYTHONPATH=ROOT, **extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(4)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    outs = [out.strip() for out, _ in results]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in results]
    assert sorted(o.split()[0] for o in outs) == ["lost", "lost", "lost", "won"], outs
    winner = procs[[o.split()[0] for o in outs].index("won")].pid
    assert all(f"pid {winner}," in o for o in outs if o.startswith("lost")), outs
    assert not epath.Path(f"{wd}/run.lock").exists()


# ------------------------------------------------------------------------------------- artefacts


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_artefact_is_rebuilt_when_its_source_changes(where, tmp_path, request, capsys):
    wd = workdir_for(where, tmp_path, request)
    p = f"{wd}/vocab.json"
    builds = []

    def build(text):
        return lambda: builds.append(text) or text.encode()

    a = {
        "corpus": "kjv",
        "source_sha256": rundir.text_digest(["in the beginning"]),
        "vocab_size": 100,
    }
    assert rundir.artefact(p, a, build("A")) == b"A"
    assert rundir.artefact(p, a, build("A2")) == b"A"  # same provenance: reused
    b = dict(a, corpus="ptb", source_sha256=rundir.text_digest(["the n cat"]))
    assert rundir.artefact(p, b, build("B")) == b"B"
    assert builds == ["A", "B"]
    err = capsys.readouterr().err
    assert (
        f"lbtrain: warning: rebuilding {p}: it was built from other data (corpus: 'kjv' -> 'ptb'; "
        "source_sha256: " in err
    )
    assert epath.Path(p).read_bytes() == b"B"
    with pytest.raises(
        StorageError, match=f"{p} does not match this run: it was built from other data"
    ):
        rundir.artefact(p, a, build("A"), on_mismatch="refuse")


def test_artefact_without_or_with_a_wrong_record_is_rebuilt(tmp_path, capsys):
    p = tmp_path / "spm.model"
    p.write_bytes(b"left by a failed run")  # no sidecar
    prov = {"corpus": "x"}
    assert rundir.artefact(p, prov, lambda: b"fresh") == b"fresh"
    assert "it has no provenance record (spm.model.provenance.json)" in capsys.readouterr().err
    p.write_bytes(b"changed behind our back")  # the sidecar no longer describes these bytes
    assert rundir.artefact(p, prov, lambda: b"fresh again") == b"fresh again"
    assert (
        "its bytes differ from those recorded in spm.model.provenance.json"
        in capsys.readouterr().err
    )
    assert rundir.artefact(p, prov, lambda: b"unused", is_writer=False) == b"fresh again"


def test_non_writer_builds_but_never_writes(tmp_path):
    assert rundir.artefact(tmp_path / "vocab.json", {"a": 1}, lambda: b"v", is_writer=False) == b"v"
    assert list(tmp_path.iterdir()) == []


def test_tfds_data_on_gcs_names_the_missing_extra_or_the_unprepared_split(gcs, monkeypatch):
    """Reading data from gs:// either works (the gcs extra is installed: an unprepared split is the
    one-line 'not prepared' error naming the bucket) or says which extra to install."""
    from lbtrain.data.prepare import command_hint
    from lbtrain.data.tfds_split import open_split
    from lbtrain.errors import DataError

    root = f"{gcs.root}/tfds"
    prepare = command_hint("mnist", root)
    with pytest.raises(DataError, match=f"not prepared in {root}: run `lbtrain-data prepare mnist"):
        open_split("mnist", "train", root, instead="use data.source=embedded", prepare=prepare)
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as if the extra were not installed
    with pytest.raises(StorageError, match=r"pip install '\.\[gcs\]' in the lbtrain checkout"):
        open_split("mnist", "train", root, instead="use data.source=embedded", prepare=prepare)
