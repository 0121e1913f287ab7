"""metrics.jsonl and TensorBoard hold exactly one row per (step, kind) across SIGKILLs and resumes,
on a local folder and on the GCS emulator. The killed writer is a real process killed with SIGKILL;
the TensorBoard side is read back with TensorBoard's own event reader."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from etils import epath

from experiments import ROOT
from lbtrain import metrics
from lbtrain.errors import StorageError

# A writer like the loop's: a train row every step, an eval row every 10, flush before each
# "checkpoint" (every `ckpt` steps); stops (sleeps) after `stop` steps, to be killed there.
WRITER = textwrap.dedent("""
    import sys, time
    from lbtrain.metrics import MetricWriter
    workdir, start, stop, ckpt, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),\
 int(sys.argv[4]), float(sys.argv[5])
    w = MetricWriter(workdir, resume_step=start or None, flush_every_s=3600)
    for s in range(start + 1, stop + 1):
        w.write(s, "train", {"loss": s + tag})
        if s % 10 == 0:
            w.write(s, "valid", {"loss": -s - tag})
        if s % ckpt == 0:
            w.flush()
    print("ready", flush=True)
    time.sleep(600)
""")


def killed_writer(workdir, start, stop, ckpt, tag, env=None):
    """Run the writer from ``start`` to ``stop`` in a subprocess, then SIGKILL it."""
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(workdir), str(start), str(stop), str(ckpt), str(tag)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line == "ready\n", proc.stderr.read()[-3000:]
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)


def tensorboard_scalars(workdir, tmp_path, tag):
    """{step: value} of ``tag`` as TensorBoard shows it (its EventAccumulator, purging included)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    src = epath.Path(workdir) / "tb"
    local = tmp_path / "tb-copy"
    local.mkdir(exist_ok=True)
    for f in src.iterdir():
        (local / f.name).write_bytes(f.read_bytes())
    acc = EventAccumulator(str(local))
    acc.Reload()
    events = acc.Scalars(tag)
    steps = [e.step for e in events]
    assert len(steps) == len(set(steps)), f"{tag}: a step shown twice: {steps}"
    return {e.step: e.value for e in events}


def check_history(workdir, tmp_path, last, values):
    """Rows 1..last once each, with ``values(step)`` as the loss (the process that logged it
    last)."""
    train = metrics.read_metrics(workdir, "train")
    assert [r["step"] for r in train] == list(range(1, last + 1))
    assert [r["loss"] for r in train] == [values(s) for s in range(1, last + 1)]
    valid = metrics.read_metrics(workdir, "valid")
    assert [r["step"] for r in valid] == list(range(10, last + 1, 10))
    # the file itself has one line per (step, kind) (not only the deduplicating reader's view)
    lines = (epath.Path(workdir) / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == last + last // 10
    tb = tensorboard_scalars(workdir, tmp_path, "train/loss")
    assert sorted(tb) == list(range(1, last + 1))
    for s, v in tb.items():
        assert v == pytest.approx(values(s)), s


def kill_and_resume(workdir, tmp_path, env=None):
    # run 1 checkpoints at 20 and is killed at 27; run 2 resumes from 20, checkpoints at 40, killed
    # at 45; run 3 resumes from 40 and finishes at 60
    killed_writer(workdir, 0, 27, 20, 0.5, env)
    killed_writer(workdir, 20, 45, 20, 0.25, env)
    w = metrics.MetricWriter(workdir, resume_step=40, flush_every_s=3600)
    assert w.has(40, "train") and w.has(40, "valid") and not w.has(41, "train")
    for s in range(41, 61):
        w.write(s, "train", {"loss": s + 0.125})
        if s % 10 == 0:
            w.write(s, "valid", {"loss": -s - 0.125})
    assert [r["step"] for r in w.rows("valid")] == [10, 20, 30, 40, 50, 60]
    w.close()
    # results.json is built after the close, from the whole run's rows (every process's, not only
    # this one's)
    assert [r["step"] for r in w.rows("valid")] == [10, 20, 30, 40, 50, 60]
    with pytest.raises(RuntimeError, match="write.. after close"):
        w.write(61, "train", {"loss": 0.0})
    check_history(
        workdir, tmp_path, 60, lambda s: s + (0.5 if s <= 20 else 0.25 if s <= 40 else 0.125)
    )


def test_one_row_per_step_across_kills_local(tmp_path):
    kill_and_resume(tmp_path / "run", tmp_path)


def test_one_row_per_step_across_kills_gcs(gcs, tmp_path):
    kill_and_resume(f"{gcs.root}/run", tmp_path, gcs.env)
    assert not os.path.exists(os.path.join(ROOT, "gs:"))  # nothing written under the current folder


def test_killed_before_the_first_checkpoint_starts_over(tmp_path):
    workdir = tmp_path / "run"
    # never reached a checkpoint: a fresh start replays 1..15
    killed_writer(workdir, 0, 15, 20, 0.5)
    w = metrics.MetricWriter(workdir, resume_step=None)
    for s in range(1, 31):
        w.write(s, "train", {"loss": s + 0.25})
        if s % 10 == 0:
            w.write(s, "valid", {"loss": -s})
    w.close()
    check_history(workdir, tmp_path, 30, lambda s: s + 0.25)


def test_a_resume_drops_every_line_that_is_not_a_whole_row_with_a_warning(tmp_path, capsys):
    """Bytes that are not UTF-8, a row that is not an object, one without an integer step or a
    kind, and a torn last line: each is dropped with a warning naming its line, as a torn line
    always was, and the rewrite at open leaves them out; the good rows stay."""
    good = [{"step": s, "kind": "train", "loss": float(s)} for s in (1, 2, 3)]
    bad = [b"\xff\xfe", b"[1]", b'{"kind": "train"}', b'{"step": "2", "kind": "train"}']
    bad += [b'{"step": 2}', b'{"step": 3, "kind": "tr']
    lines = [json.dumps(good[0]).encode(), *bad[:3], json.dumps(good[1]).encode(), *bad[3:5]]
    lines += [json.dumps(good[2]).encode(), bad[5]]
    (tmp_path / "metrics.jsonl").write_bytes(b"\n".join(lines))
    w = metrics.MetricWriter(tmp_path, resume_step=3, tensorboard=False)
    assert w.rows() == good
    w.close()
    err = capsys.readouterr().err.splitlines()
    where = tmp_path / "metrics.jsonl"
    assert err == [
        f"lbtrain: warning: {where}: line 2 is not UTF-8 (byte 0xff); dropped",
        f"lbtrain: warning: {where}: line 3 is not a JSON object; dropped",
        f"lbtrain: warning: {where}: line 4 has no integer step; dropped",
        f"lbtrain: warning: {where}: line 6 has no integer step; dropped",
        f"lbtrain: warning: {where}: line 7 has no kind; dropped",
        f"lbtrain: warning: {where}: line 9 is not JSON; dropped",
    ]
    assert [json.loads(x) for x in where.read_text().splitlines()] == good


def test_rewriting_a_row_replaces_it(tmp_path):
    w = metrics.MetricWriter(tmp_path, tensorboard=False)
    w.write(5, "valid", {"accuracy": 0.5})
    w.write(5, "valid", {"accuracy": 0.75})  # e.g. the final eval of a finished run, repeated
    w.write(6, "train", {"loss": float("nan")})
    w.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert lines == [
        '{"step": 5, "kind": "valid", "accuracy": 0.75}',
        '{"step": 6, "kind": "train", "loss": "nan"}',
    ]


def test_disabled_writer_writes_nothing(tmp_path):
    w = metrics.MetricWriter(tmp_path / "run", enabled=False)
    w.write(1, "train", {"loss": 1.0})
    w.flush()
    w.close()
    assert not (tmp_path / "run").exists()


def test_full_disk_while_logging_is_one_line(tmp_path):
    from support.storage_faults import tiny_tmpfs

    with tiny_tmpfs(tmp_path / "small", "64k") as mount:
        w = metrics.MetricWriter(mount / "run", flush_every_s=3600)
        with pytest.raises(StorageError) as err:
            for s in range(1, 100_000):
                w.write(s, "train", {"loss": 1.0, "note": "x" * 200})
        assert str(mount / "run") in str(err.value) and "no space left on the device" in str(
            err.value
        )
        assert "\n" not in str(err.value)
