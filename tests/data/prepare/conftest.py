"""A real HTTP server on 127.0.0.1 serving replicas of every official source file at
``<url>/mirror/<basename>``, and the ``--checksums`` table the tests compute for them."""

import pytest
from support import data_replicas
from support.http_server import FileServer


class Replicas:
    def __init__(self, tmp_path_factory):
        self.mnist = data_replicas.mnist_files()
        self.ptb_texts = data_replicas.ptb_texts()
        self.wmt16, self.wmt16_pairs = data_replicas.wmt16_files()
        self.files = {
            **self.mnist,
            "simple-examples.tgz": data_replicas.ptb_archive(self.ptb_texts),
            **self.wmt16,
        }
        self.server = FileServer({f"/mirror/{k}": v for k, v in self.files.items()})
        table = data_replicas.checksums(self.files)
        table.update(data_replicas.md5_table(self.ptb_texts))
        self.table = table
        folder = tmp_path_factory.mktemp("replicas")
        self.checksums = data_replicas.write_json(folder / "checksums.json", table)

    @property
    def mirror(self) -> str:
        return f"{self.server.url}/mirror"

    def args(self, name: str, root, *extra: str) -> list[str]:
        """``lbtrain-data prepare`` arguments for ``name`` into ``root`` from the mirror."""
        return [
            "prepare",
            name,
            f"--data_dir={root}",
            f"--mirror={self.mirror}",
            f"--checksums={self.checksums}",
            "--quiet",
            *extra,
        ]


@pytest.fixture(scope="session")
def replicas(tmp_path_factory):
    r = Replicas(tmp_path_factory)
    yield r
    r.server.stop()
