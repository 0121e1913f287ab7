"""What a worker calls to install lbtrain: ``curl -LsSf https://astral.sh/uv/install.sh`` prints an
installer that copies the fake ``uv`` (``folder/uv``) into ``$UV_INSTALL_DIR``; ``uv venv`` and
``uv pip install`` write ``venv/bin/python`` and ``venv/bin/lbtrain`` as scripts that run the test's
own interpreter (lbtrain from the unpacked source, or the state's ``program`` instead), and fail
when the state's ``uv_fail`` is set."""

from __future__ import annotations

import os

from .errors import fail
from .state import load_state, record, state_folder

UV_INSTALLER = "https://astral.sh/uv/install.sh"


def curl(argv: list) -> int:
    folder = state_folder()
    record(folder, "curl", argv)
    if argv[-1] != UV_INSTALLER:
        fail(
            f"curl: (6) Could not resolve host (this fake serves only uv's installer): {argv[-1]}",
            6,
        )
    uv_path = os.path.join(folder, "uv")
    print(
        f'set -e\n: "${{UV_INSTALL_DIR:?}}"\nmkdir -p "$UV_INSTALL_DIR"\ncp {uv_path} '
        '"$UV_INSTALL_DIR/uv"\n'
        'echo "installing to $UV_INSTALL_DIR"\n'
    )
    return 0


def write_script(path: str, text: str):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


def uv(argv: list) -> int:
    folder = state_folder()
    record(folder, "uv", argv)
    state = load_state(folder)
    python = state["python"]
    if argv[:1] == ["venv"]:
        venv = argv[-1]
        os.makedirs(os.path.join(venv, "bin"), exist_ok=True)
        write_script(os.path.join(venv, "bin", "python"), f'#!/bin/sh\nexec {python} "$@"\n')
        print(f"Using CPython (fake uv, on {python})\nCreating virtual environment at: {venv}")
        return 0
    if argv[:2] == ["pip", "install"]:
        if state["uv_fail"]:
            fail("  x No solution found when resolving dependencies (fake uv told to fail)")
        venv_python = argv[argv.index("--python") + 1]
        project = argv[argv.index("-e") + 1].split("[")[0]
        bin_dir = os.path.dirname(venv_python)
        path = f"export PYTHONPATH={project}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        write_script(venv_python, f'#!/bin/sh\n{path}exec {python} "$@"\n')
        program = state["program"] and os.path.abspath(state["program"])
        run = f"{python} {program}" if program else f"{python} -m lbtrain.main"
        write_script(os.path.join(bin_dir, "lbtrain"), f'#!/bin/sh\n{path}exec {run} "$@"\n')
        print(f"Installed lbtrain from {project} (fake uv)")
        return 0
    fail(f"fake uv: unsupported command {argv}", 2)
