"""One HTTP attempt of a download (:func:`attempt`) and what decides whether another follows
(:func:`transient`); :mod:`~lbtrain.data.prepare.download` retries, resumes and checks around it.

An attempt appends to ``<dest>.part`` the bytes after its current size (``Range``), never past a
limit; it is cut when the transfer is slower than :class:`Pace` allows. What the server says about
the whole file decides before the first byte is written: more than the limit is
:class:`TooLarge`, a complete file of another size than the recorded one is :class:`WrongFile`
(neither is retried, and neither leaves bytes of that file to resume from). A part the server's
file does not continue (it answers 416 before the recorded size) is discarded with one line and the
file fetched from its first byte.
"""

from __future__ import annotations

import dataclasses
import errno
import http.client
import os
import re
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from typing import Protocol

from lbtrain.errors import DataError

CHUNK = 1 << 20
USER_AGENT = "lbtrain-data (+https://github.com/; research data preparation)"
SPEED_LIMIT = 1024  # bytes/s: a transfer slower than this for SPEED_TIME s is cut and retried
SPEED_TIME = 30.0  # s; also how long a silent connection is waited for
CHECKSUMS_HINT = (
    "a copy of your own that differs from the official file needs --checksums=FILE "
    "(docs/data.md, 'Your own copy of the data')"
)
# reasons of a URLError that another attempt cannot change: no such file (file://), no access,
# a certificate that does not verify
_PERMANENT_OS_ERRORS = (
    FileNotFoundError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
    ssl.SSLCertVerificationError,
)


class Resource(Protocol):
    """What an attempt reads of the file it fetches (a :class:`.download.Resource`)."""

    @property
    def size(self) -> int:
        """Its recorded size in bytes (0: not recorded)."""

    @property
    def basename(self) -> str:
        """Its name in the download folder."""


def say(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"lbtrain-data: {message}", file=sys.stderr)


class TooSlow(ConnectionError):
    """The transfer stalled or trickled below the minimum rate (retried; each counts as a failed
    attempt even when it brought some bytes)."""


class TooLarge(DataError):
    """The server sent more than the file's bound: the part is deleted, not retried."""


class WrongFile(DataError):
    """The server's file is whole but not of the recorded size: not retried, none of it kept."""


def transient(e: BaseException) -> bool:
    """Worth another attempt: the server or the network, not the request or this machine."""
    if isinstance(e, urllib.error.HTTPError):
        return e.code >= 500 or e.code in (408, 429)
    if isinstance(e, urllib.error.URLError):
        reason = e.reason
        if not isinstance(reason, OSError):  # urllib's word on the URL itself: "unknown url type"
            return False
        if isinstance(reason, socket.gaierror):
            return reason.errno != socket.EAI_NONAME  # no such host; EAI_AGAIN may pass
        return not isinstance(reason, _PERMANENT_OS_ERRORS)  # unreachable, refused, reset, ...
    if isinstance(e, http.client.InvalidURL):
        return False
    return isinstance(e, (ConnectionError, TimeoutError, http.client.HTTPException))


def _progress(total: int, initial: int, name: str, quiet: bool):
    from tqdm import tqdm

    return tqdm(
        total=total or None,
        initial=initial,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=name,
        disable=quiet,
        file=sys.stderr,
        dynamic_ncols=True,
        mininterval=0.5,
    )


class Redirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects as urllib does, keeping the URL last asked for (what errors name)."""

    def __init__(self, url: str):
        self.last = url

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            self.last = new.full_url
        return new


@dataclasses.dataclass(frozen=True)
class Pace:
    """The slowest transfer accepted: ``limit`` bytes/s averaged over ``seconds`` (a connection
    silent for ``seconds`` is cut as well)."""

    limit: float = SPEED_LIMIT
    seconds: float = SPEED_TIME


class _Meter:
    """Raises :class:`TooSlow` once a window of ``pace.seconds`` brought fewer than
    ``limit * seconds`` bytes."""

    def __init__(self, pace: Pace):
        self.pace = pace
        self.start = time.monotonic()
        self.bytes = 0

    def add(self, n: int) -> None:
        self.bytes += n
        elapsed = time.monotonic() - self.start
        if elapsed < self.pace.seconds:
            return
        if self.bytes < self.pace.limit * elapsed:
            raise TooSlow(
                f"slower than {self.pace.limit:,.0f} bytes/s for {self.pace.seconds:g} s "
                f"({self.bytes:,} bytes in {elapsed:.1f} s)"
            )
        self.start, self.bytes = time.monotonic(), 0


def _read(response, pace: Pace) -> bytes:
    """The next bytes of the body as they arrive (not waiting for a whole chunk)."""
    try:
        return response.read1(CHUNK)
    except TimeoutError:
        raise TooSlow(f"no byte for {pace.seconds:g} s") from None


def _too_large(url: str, part: str, limit: int, resource: Resource, what: str) -> TooLarge:
    if os.path.exists(part):
        os.remove(part)
    bound = f"its recorded size, {limit:,} bytes" if resource.size else f"{limit:,} bytes"
    return TooLarge(
        f"{url} {what} more than {bound}, for {resource.basename}: stopped and deleted {part}; "
        f"it is not the file recorded for it: check the URL or mirror; {CHECKSUMS_HINT}"
    )


def _wrong_file(url: str, size: int, resource: Resource) -> WrongFile:
    return WrongFile(
        f"{url} is a file of {size:,} bytes, but {resource.size:,} bytes are recorded for "
        f"{resource.basename}: it is not that file (not retried, none of it kept): check the URL "
        f"or mirror; {CHECKSUMS_HINT}"
    )


def _whole_size(response, have: int) -> int | None:
    """The size of the server's whole file by the response's headers (None: not said)."""
    length = response.headers.get("Content-Length")
    length = int(length) if length and length.isdigit() else None
    if not have:
        return length
    span = re.fullmatch(
        r"bytes \d+-\d+/(\d+)", (response.headers.get("Content-Range") or "").strip()
    )
    if span:
        return int(span.group(1))
    return have + length if length is not None else None


def _open(opener, url: str, have: int, pace: Pace):
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        return opener.open(request, timeout=pace.seconds)
    except urllib.error.URLError as e:
        if isinstance(e, urllib.error.HTTPError) or not isinstance(e.reason, TimeoutError):
            raise
        raise TooSlow(f"no answer for {pace.seconds:g} s") from None
    except TimeoutError:
        raise TooSlow(f"no answer for {pace.seconds:g} s") from None


def attempt(
    opener, url: str, part: str, resource: Resource, pace: Pace, limit: int, quiet: bool
) -> None:
    """One attempt: append the bytes after ``part``'s current size (or start over on a 200),
    never writing past ``limit`` bytes."""
    have = os.path.getsize(part) if os.path.exists(part) else 0
    try:
        response = _open(opener, url, have, pace)
    except urllib.error.HTTPError as e:
        if e.code != 416 or not have:
            raise
        if not resource.size or have == resource.size:
            return  # nothing after the part: it is whole (its checksum decides)
        os.remove(part)
        say(
            f"{part} ({have:,} bytes) does not continue into the file at {url}: discarded, "
            "fetching the file from its first byte",
            quiet,
        )
        return attempt(opener, url, part, resource, pace, limit, quiet)
    final = response.geturl()
    with response:
        if have and response.status != 206:
            have = 0  # the server sent the whole file again
        whole = _whole_size(response, have)
        if whole is not None and whole > limit:
            raise _too_large(final, part, limit, resource, f"announces {whole:,} bytes,")
        if whole is not None and resource.size and whole != resource.size:
            if os.path.exists(part):  # resumed against the wrong file: no start of the right one
                os.remove(part)
            raise _wrong_file(final, whole, resource)
        meter = _Meter(pace)
        try:
            with (
                open(part, "ab" if have else "wb") as out,
                _progress(resource.size or whole or 0, have, resource.basename, quiet) as bar,
            ):
                written = have
                while chunk := _read(response, pace):
                    if written + len(chunk) > limit:
                        out.close()
                        raise _too_large(final, part, limit, resource, "sent")
                    out.write(chunk)
                    written += len(chunk)
                    bar.update(len(chunk))
                    meter.add(len(chunk))
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT) and not e.filename:
                raise OSError(e.errno, e.strerror, part) from None  # name the file for the CLI
            raise
    got = os.path.getsize(part)
    if resource.size and got < resource.size:
        if getattr(response, "chunked", False):  # a chunked body that ended cleanly is whole
            os.remove(part)
            raise _wrong_file(final, got, resource)
        # the connection closed early without an error: resume from here on the next attempt
        raise ConnectionError(f"connection closed at {got:,} of {resource.size:,} bytes")
