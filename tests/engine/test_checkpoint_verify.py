"""Verified checkpoints through real Orbax (local and on the GCS emulator): flipped bits, truncated
and partial checkpoints fall back to the previous step with a warning; non-finite states are never
saved; two jax.distributed processes write one shared checkpoint."""

import errno
import os
import socket
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from etils import epath

from experiments import ROOT
from lbtrain.checkpoint import Checkpointer, NonFiniteStateError
from lbtrain.errors import DivergedError, ResumeError, StorageError


def state(seed: int):
    """A small state with a large float leaf (its data file is the largest of the checkpoint), a
    bf16 and an int leaf, and a typed PRNG key."""
    r = np.random.default_rng(seed)
    return {
        "params": {
            "w": jnp.asarray(r.standard_normal((256, 256)), jnp.float32),
            "b": jnp.asarray(r.standard_normal(7), jnp.bfloat16),
        },
        "step": jnp.int32(seed),
        "key": jax.random.key(seed),
    }


def leaves(tree):
    return [
        np.asarray(
            jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        )
        for x in jax.tree.leaves(jax.device_get(tree))
    ]


def assert_same(a, b):
    for x, y in zip(leaves(a), leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def data_files(directory, step):
    """The checkpoint's files under ``state/``, largest first (the first holds the big array's
    bytes)."""
    files, todo = [], [epath.Path(directory) / str(step) / "state"]
    while todo:
        for p in todo.pop().iterdir():
            (todo if p.is_dir() else files).append(p)
    return sorted(files, key=lambda p: -len(p.read_bytes()))


def two_checkpoints(workdir):
    ckpt = Checkpointer(str(workdir), every_steps=10)
    assert ckpt.save(10, state(10)) and ckpt.save(20, state(20))
    assert not ckpt.save(25, state(25))  # not a save step
    return ckpt


def flip_a_bit(p):
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x04
    p.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_flipped_bit_falls_back_to_the_previous_step(where, tmp_path, capsys, request):
    workdir = f"{request.getfixturevalue('gcs').root}/run" if where == "gcs" else str(tmp_path)
    ckpt = two_checkpoints(workdir)
    if where == "gcs":
        assert ckpt.directory == f"{workdir}/checkpoints"
    assert_same(ckpt.restore(state(0)), state(20))  # intact: the newest
    assert ckpt.restored_step == 20
    flip_a_bit(data_files(ckpt.directory, 20)[0])
    restored = ckpt.restore(state(0))
    assert ckpt.restored_step == 10
    assert_same(restored, state(10))
    err = capsys.readouterr().err
    assert (
        f"lbtrain: warning: the checkpoint at step 20 in {ckpt.directory} is damaged (array data "
        "does not match its digest (first: ['params']['w']; 1 arrays)): trying step 10" in err
    )
    # the damaged step gives way when the run saves that step again
    assert ckpt.save(20, state(21), force=True)
    assert_same(Checkpointer(workdir, 10).restore(state(0)), state(21))


def test_truncated_checkpoint_falls_back(tmp_path, capsys):
    ckpt = two_checkpoints(tmp_path)
    biggest = data_files(ckpt.directory, 20)[0]
    biggest.write_bytes(biggest.read_bytes()[:1000])
    assert_same(ckpt.restore(state(0)), state(10))
    assert "the checkpoint at step 20 in" in capsys.readouterr().err and ckpt.restored_step == 10


def test_partial_checkpoint_falls_back(tmp_path, capsys):
    ckpt = two_checkpoints(tmp_path)
    for p in data_files(ckpt.directory, 20):
        if "ocdbt.process_0" in str(p):
            p.unlink()  # as if the process died while writing its shards
    assert_same(ckpt.restore(state(0)), state(10))
    assert "is damaged (unreadable" in capsys.readouterr().err


def test_no_good_checkpoint_is_one_line(tmp_path):
    ckpt = two_checkpoints(tmp_path)
    for step in (10, 20):
        flip_a_bit(data_files(ckpt.directory, step)[0])
    with pytest.raises(ResumeError) as err:
        ckpt.restore(state(0))
    assert str(err.value) == (
        f"no usable checkpoint in {ckpt.directory} (damaged: step 20, step 10): move that "
        "folder aside to start over, or restore it from a copy"
    )


def test_non_finite_state_is_never_saved(tmp_path):
    ckpt = two_checkpoints(tmp_path)
    bad = state(30)
    bad["params"]["b"] = bad["params"]["b"].at[3].set(jnp.inf)
    with pytest.raises(NonFiniteStateError) as err:
        ckpt.save(30, bad, force=True)
    assert isinstance(err.value, DivergedError)
    assert "step 30 has non-finite values (first: params['params']['b'])" in str(err.value)
    assert "the last good checkpoint is step 20" in str(err.value)
    assert ckpt.all_steps() == [10, 20] and ckpt.latest_step() == 20


def test_full_disk_while_saving_keeps_the_last_checkpoint(tmp_path, caplog, capfd):
    from support.storage_faults import tiny_tmpfs

    with tiny_tmpfs(tmp_path / "small", "600k") as mount:
        ckpt = Checkpointer(str(mount / "run"), every_steps=10)
        small = {
            "params": {
                "w": jnp.asarray(np.random.default_rng(1).standard_normal((64, 64)), jnp.float32)
            }
        }
        assert ckpt.save(10, small)
        big = {
            "params": {
                "w": jnp.asarray(np.random.default_rng(2).standard_normal((400, 400)), jnp.float32)
            }
        }
        with pytest.raises(StorageError) as err:
            ckpt.save(20, big)
        assert str(err.value) == (
            f"cannot save the checkpoint at step 20 in {mount / 'run' / 'checkpoints'} (no space "
            "left on the device): the checkpoint at step 10 is intact; free space or fix "
            "permissions, then run the same command again to resume"
        )
        # that line alone: Orbax's save threads logged the same failure with its traceback, one
        # record a thread, before the save raised it here
        assert [r.getMessage()[:80] for r in caplog.records if r.exc_info] == []
        assert "Traceback" not in capfd.readouterr().err
        # a new run cleans the failed save's leftovers
        again = Checkpointer(str(mount / "run"), every_steps=10)
        assert again.all_steps() == [10]
        assert_same(again.restore({"params": {"w": jnp.zeros((64, 64), jnp.float32)}}), small)
        assert sorted(os.listdir(mount / "run" / "checkpoints")) == ["10"]


def test_a_failed_saves_late_write_callbacks_print_nothing_after_its_line():
    """A failed save's writes still in flight finish after Orbax closed its event loop; each one's
    tensorstore callback into that loop raises 'Event loop is closed' through sys.unraisablehook
    (one bare traceback a write, seen ahead of the run's one line). The same mechanism, made
    deterministic: without the filter the traceback prints, with it nothing does, and any other
    unraisable error still prints."""
    script = textwrap.dedent(
        """
        import asyncio, sys, time
        import tensorstore as ts
        from lbtrain.checkpoint import quiet_abandoned_writes

        def late_write(loop):
            promise, future = ts.Promise.new()
            future.add_done_callback(lambda f: loop.call_soon_threadsafe(print, "never"))
            promise.set_result(1)

        closed = asyncio.new_event_loop()
        closed.close()
        if sys.argv[1] == "quiet":
            quiet_abandoned_writes()
            quiet_abandoned_writes()
        late_write(closed)
        promise, future = ts.Promise.new()
        future.add_done_callback(lambda f: 1 / 0)
        promise.set_result(1)
        time.sleep(0.2)
        print("done", flush=True)
        """
    )
    runs = {
        how: subprocess.run(
            [sys.executable, "-c", script, how],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for how in ("plain", "quiet")
    }
    for run in runs.values():
        assert run.returncode == 0 and run.stdout == "done\n", run.stderr
        assert run.stderr.count("ZeroDivisionError: division by zero") == 1
    assert runs["plain"].stderr.count("RuntimeError: Event loop is closed") == 1
    assert "Event loop is closed" not in runs["quiet"].stderr
    assert runs["quiet"].stderr.count("Traceback") == 1


def test_the_filter_is_in_place_before_a_save_ends_not_only_after_a_failure(tmp_path, monkeypatch):
    """The late callbacks can run on tensorstore's threads before a failure reaches the caller:
    the filter is installed by the time Orbax's save runs, and a save that succeeds leaves it in
    place too."""
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    ckpt = Checkpointer(str(tmp_path / "run"), every_steps=10)
    real_save, seen = ckpt.manager.save, []

    def save(*args, **kwargs):
        seen.append(getattr(sys.unraisablehook, "_drops_closed_loop_callbacks", False))
        return real_save(*args, **kwargs)

    monkeypatch.setattr(ckpt.manager, "save", save)
    assert ckpt.save(10, state(1))
    assert seen == [True]
    assert sys.unraisablehook._drops_closed_loop_callbacks
    ckpt.close()


def test_a_full_disk_raised_as_the_oserror_itself_is_the_same_line(tmp_path, monkeypatch):
    """Orbax's metadata writes may raise the ENOSPC OSError itself before tensorstore's ValueError
    (which comes first depends on its threads): the same line as above."""
    ckpt = Checkpointer(str(tmp_path / "run"), every_steps=10)
    state = {"params": {"w": jnp.ones((4, 4), jnp.float32)}}
    assert ckpt.save(10, state)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ckpt.manager, "wait_until_finished", full)
    with pytest.raises(StorageError) as err:
        ckpt.save(20, state)
    assert str(err.value) == (
        f"cannot save the checkpoint at step 20 in {tmp_path / 'run' / 'checkpoints'} (no space "
        "left on the device): the checkpoint at step 10 is intact; free space or fix "
        "permissions, then run the same command again to resume"
    )


MULTIHOST = textwrap.dedent("""
    import os, sys
    import jax, jax.numpy as jnp, numpy as np
    address, pid, workdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    jax.distributed.initialize(coordinator_address=address, num_processes=2, process_id=pid)
    from jax.sharding import NamedSharding, PartitionSpec as P
    from lbtrain.checkpoint import Checkpointer
    mesh = jax.make_mesh((4,), ("data",), axis_types=(jax.sharding.AxisType.Explicit,))
    def make(scale):
        rows = np.arange(8 * 3, dtype=np.float32).reshape(8, 3) * scale\
  # split by rows over 4 devices
        carry = jax.make_array_from_callback((8, 3), NamedSharding(mesh, P("data")),\
 lambda i: rows[i])
        w = jax.device_put(jnp.full((5, 5), scale, jnp.float32), NamedSharding(mesh, P()))
        return {"params": {"w": w}, "carry": carry}
    ckpt = Checkpointer(workdir, 1)
    assert ckpt.save(1, make(1.0)) and ckpt.save(2, make(2.0))
    back = ckpt.restore(make(0.0))
    assert ckpt.restored_step == 2, ckpt.restored_step
    for shard in back["carry"].addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data),\
 (np.arange(24, dtype=np.float32).reshape(8, 3) * 2)[shard.index])
    ckpt.close()
    print("ok", pid, flush=True)
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "gcs"])
def test_two_processes_write_one_shared_checkpoint(where, tmp_path, request):
    extra = request.getfixturevalue("gcs").env if where == "gcs" else {}
    workdir = (
        f"{request.getfixturevalue('gcs').root}/run" if where == "gcs" else str(tmp_path / "shared")
    )
    address = f"127.0.0.1:{free_port()}"
    env = dict(
        os.environ, PYTHONPATH=ROOT, XLA_FLAGS="--xla_force_host_platform_device_count=2", **extra
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MULTIHOST, address, str(i), workdir],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for i, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"ok {i}" in out, out[-3000:]
    # both processes' shards are in the one directory: a single process (1 device) reads the whole
    # state
    ckpt = Checkpointer(workdir, 1)
    template = {
        "params": {"w": jnp.zeros((5, 5), jnp.float32)},
        "carry": jnp.zeros((8, 3), jnp.float32),
    }
    back = ckpt.restore(template)
    assert ckpt.restored_step == 2
    np.testing.assert_array_equal(
        np.asarray(back["carry"]), np.arange(24, dtype=np.float32).reshape(8, 3) * 2
    )
    np.testing.assert_array_equal(np.asarray(back["params"]["w"]), np.full((5, 5), 2.0, np.float32))
    names = {str(p) for p in (epath.Path(workdir) / "checkpoints" / "2" / "state").iterdir()}
    assert any(n.endswith("ocdbt.process_0") for n in names) and any(
        n.endswith("ocdbt.process_1") for n in names
    )


@pytest.mark.slow
def test_a_disk_that_fills_mid_run_is_one_line_and_the_same_command_resumes(tmp_path):
    """``lbtrain`` on a 256 KiB file system: the checkpoint at step 250 fits, the one at step 500
    does not. The run says so in one line (no thread tracebacks before it) and exits 1; with room
    made, the same command resumes from step 250 and finishes."""
    from support.run_metrics import train_steps
    from support.storage_faults import tiny_tmpfs

    with tiny_tmpfs(tmp_path / "small", "256k") as mount:
        command = [
            sys.executable,
            "-m",
            "lbtrain.main",
            "--config=configs/mnist_lstm.py:runlocal=True",
            "--config.log_every_steps=250",
            f"--workdir={mount / 'run'}",
        ]
        full = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
        checkpoints = mount / "run" / "checkpoints"
        assert full.returncode == 1, full.stderr[-3000:]
        assert full.stderr.splitlines() == [
            f"lbtrain: error: cannot save the checkpoint at step 500 in {checkpoints} (no space "
            "left on the device): the checkpoint at step 250 is intact; free space or fix "
            "permissions, then run the same command again to resume"
        ]
        subprocess.run(["mount", "-o", "remount,size=4m", str(mount)], check=True)
        again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"resuming from the checkpoint at step 250 in {checkpoints}" in again.stdout
        assert train_steps(mount / "run") == [250, 500]
        assert (mount / "run" / "results.json").exists()
