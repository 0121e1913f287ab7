"""The optax user's install, as README tells it: the wheel built from this checkout, installed with
``--no-deps`` into a fresh environment that holds only jax, optax and numpy from the package
index (the versions of the environment running the tests). README's optax example runs there,
``pip check`` is clean, the environment gains no top-level name but ``lbtrain``, and the commands
that need the engine say in one line which extra to install.

Without the package index (no network) these tests skip in one line, except under ``CI=true``,
where they fail: CI reaches the index, and a skip there would hide a broken install."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata

import pytest
from support.readme import readme, section_blocks

from experiments import ROOT

pytestmark = pytest.mark.slow

CORE = ("jax", "optax", "numpy")
OPTAX_SECTION = "## Use the optimizers in your own optax code"


def _run(cmd, timeout=900, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)


def _must(proc):
    assert proc.returncode == 0, f"{proc.args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


class Fresh:
    """The built wheel and a fresh environment: the core from the index, then the wheel."""

    def __init__(self, folder):
        self.folder = folder
        probe = _run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", folder / "probe"]
            + [f"optax=={metadata.version('optax')}"],
            timeout=300,
        )
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            reason = f"the package index is unreachable, so the install tests cannot run ({last})"
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI=true and {reason}", pytrace=False)
            pytest.skip(reason)
        self.wheel = self._build()
        env = folder / "env"
        _must(_run([sys.executable, "-m", "venv", env]))
        self.bin = env / "bin"
        self.python = str(self.bin / "python")
        self.site = _must(
            _run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        ).stdout.strip()
        pins = [f"{name}=={metadata.version(name)}" for name in CORE]
        _must(_run([self.python, "-m", "pip", "install", "--quiet", *pins]))
        self.before = set(os.listdir(self.site))
        _must(_run([self.python, "-m", "pip", "install", "--quiet", "--no-deps", self.wheel]))
        self.gained = set(os.listdir(self.site)) - self.before

    def _build(self) -> str:
        """The wheel, built (pip's isolated build) from a copy of every file git tracks, as they
        are in the working tree (experiments/, scripts/, tests/ and configs/ included, so the
        packaging's choice of what to install is what is tested), and the checkout gains no build/
        or egg-info."""
        src = self.folder / "src"
        tracked = _must(_run(["git", "ls-files", "-z"], cwd=ROOT)).stdout.split("\0")
        for name in filter(None, tracked):
            if os.path.isfile(os.path.join(ROOT, name)):  # not one deleted in the working tree
                os.makedirs(src / os.path.dirname(name), exist_ok=True)
                shutil.copy(os.path.join(ROOT, name), src / name)
        dist = self.folder / "dist"
        _must(
            _run(
                [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
                + ["--wheel-dir", str(dist), str(src)]
            )
        )
        (wheel,) = dist.glob("lbtrain-*.whl")
        return str(wheel)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    return Fresh(tmp_path_factory.mktemp("install"))


def test_the_wheel_and_the_environment_hold_no_top_level_name_but_lbtrain(fresh):
    with zipfile.ZipFile(fresh.wheel) as z:
        tops = {name.split("/")[0] for name in z.namelist()}
        requires = [
            line.split(":", 1)[1].strip()
            for line in z.read(next(n for n in z.namelist() if n.endswith("/METADATA")))
            .decode()
            .splitlines()
            if line.startswith("Requires-Dist:")
        ]
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert tops - dist_info == {"lbtrain"}
    # the Apache-2.0 text travels with it (setuptools takes LICENSE into the dist-info)
    with zipfile.ZipFile(fresh.wheel) as z:
        (license_file,) = [n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert z.read(license_file) == (pathlib.Path(ROOT) / "LICENSE").read_bytes()
    assert {t for t in fresh.gained if not t.endswith(".dist-info")} == {"lbtrain"}
    assert any(t.startswith("lbtrain-") for t in fresh.gained)
    # the core requires jax, optax and numpy, and every other requirement sits in an extra
    core = {re.match(r"[A-Za-z0-9._-]+", r).group(0) for r in requires if "extra ==" not in r}
    assert core == set(CORE)


def test_readmes_optax_example_runs_there(fresh, tmp_path):
    (block,) = [code for lang, _, code, _ in section_blocks(readme(), OPTAX_SECTION)]
    # the example states what it prints in its last line's comment
    expected = re.search(r"# ([\d.]+), ([\d.]+)\s*$", block.strip()).groups()
    # from a folder of its own: the checkout is not importable there, the installed wheel is
    where = "import lbtrain, sys; print(lbtrain.__file__, file=sys.stderr)\n"
    proc = _must(_run([fresh.python, "-c", where + block], cwd=tmp_path))
    assert proc.stderr.strip().startswith(fresh.site), proc.stderr
    assert re.findall(r"\d+\.\d{4}", proc.stdout.strip().splitlines()[-1])[-2:] == list(expected)


def test_pip_check_is_clean(fresh):
    proc = _run([fresh.python, "-m", "pip", "check"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No broken requirements" in proc.stdout


@pytest.mark.parametrize("command", ["lbtrain", "lbtrain-data"])
def test_a_command_without_the_train_extra_is_one_line(fresh, command, tmp_path):
    proc = _run([str(fresh.bin / command), "--help"], cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert (
        line.startswith(f"{command}: error:")
        and "pip install '.[train]' in the lbtrain checkout" in line
    )
    assert "flax" in line  # names what is missing
