"""Load a script of scripts/ as a module, once per test process (the scripts define absl flags at
import, and a flag may be defined only once), or run a benchmark of scripts/benchmarks/ end to end
(:func:`run_bench`)."""

import functools
import importlib.util
import json
import os
import subprocess
import sys

from experiments import ROOT


@functools.cache
def load_script(name: str):
    """``scripts/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_bench(name: str, tmp_path, *args: str, timeout: float = 600) -> tuple[dict, str]:
    """Run ``scripts/benchmarks/<name>.py`` with ``args`` and ``--json`` into ``tmp_path``, from
    the repo root; it must exit 0. Returns the JSON it wrote and what it printed."""
    out = tmp_path / f"{name}.json"
    proc = subprocess.run(
        [sys.executable, f"scripts/benchmarks/{name}.py", *args, f"--json={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout
