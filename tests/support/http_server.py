"""A real HTTP server on 127.0.0.1 for download tests: serves files from memory at their paths,
answers ``Range`` requests with 206 as a file host does, and records every request.

``cut_after[path] = n``: the next response for ``path`` sends ``n`` bytes of its body, then closes
the connection (a download cut mid-file); ``fail_next[path] = [code, ...]``: the next requests for
``path`` are answered with these HTTP status codes first (e.g. 503, as statmt answers to parallel
downloads); ``delay_s[path] = s``: every response for ``path`` waits ``s`` seconds first;
``ignore_range``: paths answered whole (200) whatever ``Range`` asks, as some file hosts do.

Misbehaving hosts: ``endless``: paths whose body does not end (the file, then zeros, no
``Content-Length``) until the client hangs up (or after ``ENDLESS_BYTES``);
``stall_after[path] = n``: send ``n`` bytes of the body, then nothing for ``STALL_S`` seconds
before closing; ``trickle[path] = (n, s)``: send ``n`` bytes every ``s`` seconds (at most
``STALL_S`` seconds in all; after ``TRICKLES`` such responses the path answers 410, so a client
that retries forever fails instead); ``redirect[path] = target``: answer 302 with
``Location: target``. ``stop()`` ends every one of them at once.
"""

from __future__ import annotations

import dataclasses
import http.server
import re
import sys
import threading
import time

STALL_S = 20.0  # the longest a stalled or trickling response lasts
TRICKLES = 6  # trickled responses per path before it answers 410 Gone
ENDLESS_BYTES = 64 << 20  # an "endless" body ends here all the same (a bug must not fill a disk)


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
        if path in srv.redirect:
            self.send_response(302)
            self.send_header("Location", srv.redirect[path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path in srv.trickle and sum(r.path == path for r in srv.requests) > TRICKLES:
            self.send_error(410)
            return
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
        if path in srv.endless:
            self.end_headers()
            self._endless(part)
            return
        self.send_header("Content-Length", str(len(part)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        if path in srv.stall_after:
            self.wfile.write(part[: srv.stall_after[path]])
            self.wfile.flush()
            srv.stopping.wait(STALL_S)
            self.close_connection = True
            return
        if path in srv.trickle:
            self._trickle(part, *srv.trickle[path])
            return
        cut = srv.cut_after.pop(path, None)
        if cut is not None:
            self.wfile.write(part[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(part)

    def _endless(self, part: bytes) -> None:
        try:
            self.wfile.write(part)
            filler = bytes(1 << 16)
            for _ in range(ENDLESS_BYTES // len(filler)):
                if self.server.stopping.is_set():
                    break
                self.wfile.write(filler)
        except OSError:  # the client hung up
            pass
        self.close_connection = True

    def _trickle(self, part: bytes, n: int, interval_s: float) -> None:
        end = time.monotonic() + STALL_S
        try:
            for i in range(0, len(part), n):
                self.wfile.write(part[i : i + n])
                self.wfile.flush()
                if self.server.stopping.wait(interval_s) or time.monotonic() > end:
                    break
        except OSError:
            pass
        self.close_connection = True


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
        self.endless: set[str] = set()
        self.stall_after: dict[str, int] = {}
        self.trickle: dict[str, tuple[int, float]] = {}
        self.redirect: dict[str, str] = {}
        self.stopping = threading.Event()

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client hanging up is no error
            super().handle_error(request, client_address)


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

    @property
    def endless(self) -> set[str]:
        return self._server.endless

    @property
    def stall_after(self) -> dict[str, int]:
        return self._server.stall_after

    @property
    def trickle(self) -> dict[str, tuple[int, float]]:
        return self._server.trickle

    @property
    def redirect(self) -> dict[str, str]:
        return self._server.redirect

    def stop(self) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
