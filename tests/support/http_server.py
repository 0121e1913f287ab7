"""A real HTTP server on 127.0.0.1 for download tests: serves files from memory at their paths,
answers ``Range`` requests with 206 as a file host does, and records every request.

``cut_after[path] = n``: the next response for ``path`` sends ``n`` bytes of its body, then closes
the connection (a download cut mid-file); ``fail_next[path] = [code, ...]``: the next requests for
``path`` are answered with these HTTP status codes first (e.g. 503, as statmt answers to parallel
downloads); ``delay_s[path] = s``: every response for ``path`` waits ``s`` seconds first;
``ignore_range``: paths answered whole (200) whatever ``Range`` asks, as some file hosts do.
"""

from __future__ import annotations

import dataclasses
import http.server
import re
import threading
import time


@dataclasses.dataclass
class Request:
    path: str
    range: str | None


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        srv = self.server
        path = self.path.split("?", 1)[0]
        srv.requests.append(Request(path, self.headers.get("Range")))
        time.sleep(srv.delay_s.get(path, 0.0))
        failures = srv.fail_next.get(path)
        if failures:
            self.send_error(failures.pop(0))
            return
        body = srv.files.get(path)
        if body is None:
            self.send_error(404)
            return
        start, status = 0, 200
        match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        if path in srv.ignore_range:
            match = None
        if match:
            start = int(match.group(1))
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.end_headers()
                return
            status = 206
        part = body[start:]
        self.send_response(status)
        self.send_header("Content-Length", str(len(part)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        cut = srv.cut_after.pop(path, None)
        if cut is not None:
            self.wfile.write(part[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(part)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, bytes] = {}
        self.requests: list[Request] = []
        self.cut_after: dict[str, int] = {}
        self.fail_next: dict[str, list[int]] = {}
        self.delay_s: dict[str, float] = {}
        self.ignore_range: set[str] = set()


class FileServer:
    """``serve(files)`` starts it; ``url`` is its root; ``stop()`` ends it."""

    def __init__(self, files: dict[str, bytes] | None = None):
        self._server = _Server()
        self._server.files.update(files or {})
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def files(self) -> dict[str, bytes]:
        return self._server.files

    @property
    def requests(self) -> list[Request]:
        return self._server.requests

    @property
    def cut_after(self) -> dict[str, int]:
        return self._server.cut_after

    @property
    def fail_next(self) -> dict[str, list[int]]:
        return self._server.fail_next

    @property
    def ignore_range(self) -> set[str]:
        return self._server.ignore_range

    @property
    def delay_s(self) -> dict[str, float]:
        return self._server.delay_s

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
