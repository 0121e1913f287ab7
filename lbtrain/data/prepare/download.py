"""Fetch one source file: resumable over HTTP (``Range``), retried with backoff, bounded in bytes
and in time, checked against its recorded size and checksum before anything reads it.

A file is first written to ``<dest>.part``; an interrupted download leaves that part, and the next
call asks only for the bytes after it (a server that ignores ``Range`` answers 200 and the file
starts again). Only a complete file whose size and digest match is renamed to ``<dest>``: a file
that does not match is deleted and named in one :class:`~lbtrain.errors.DataError` line (expected,
got, URL). Transient failures (connection reset, HTTP 5xx, 429, a stalled or trickling transfer)
are retried with exponential backoff; anything else is one line. Free disk space is checked before
the first byte.

Bounds: a download never writes past its recorded size (a file without one: past
:data:`UNSIZED_LIMIT`): at the first byte beyond it the part is deleted and the download fails in
one line. A transfer slower than ``speed_limit`` bytes/s for ``speed_time`` seconds, or silent for
``speed_time`` seconds, is cut and retried (curl's ``--speed-limit`` / ``--speed-time``). Every
error names the URL finally fetched, after redirects.

``mirror``: take the file from ``<mirror>/<basename of the official URL>`` instead;
``from_dir``: copy it from ``<from_dir>/<basename>`` (a compute node without internet); a
different file of that name already in the download folder is replaced by that copy.
"""

from __future__ import annotations

import dataclasses
import errno
import filecmp
import hashlib
import http.client
import os
import shutil
import sys
import time
import urllib.error
import urllib.request

from lbtrain.errors import DataError

CHUNK = 1 << 20
USER_AGENT = "lbtrain-data (+https://github.com/; research data preparation)"
SPEED_LIMIT = 1024  # bytes/s: a transfer slower than this for SPEED_TIME s is cut and retried
SPEED_TIME = 30.0  # s; also how long a silent connection is waited for
UNSIZED_LIMIT = 2 * 10**9  # bytes: the most written of a file whose size is not recorded
CHECKSUMS_HINT = (
    "a copy of your own that differs from the official file needs --checksums=FILE "
    "(docs/data.md, 'Your own copy of the data')"
)


@dataclasses.dataclass(frozen=True)
class Resource:
    """One file of a dataset's sources: where it lives officially and what it must hash to.

    ``digest`` is ``"sha256:<hex>"`` or ``"md5:<hex>"``; ``size`` in bytes (0: not recorded)."""

    url: str
    size: int
    digest: str
    name: str = ""  # the file name under the download folder (default: the URL's basename)

    @property
    def basename(self) -> str:
        return self.name or self.url.rstrip("/").rsplit("/", 1)[-1]


def human_size(size: int) -> str:
    """Bytes as GB (1e9) from 1 GB up, as MB from 1 MB up, else as kB."""
    if size >= 1e9:
        return f"{size / 1e9:,.2f} GB"
    return f"{size / 1e6:,.1f} MB" if size >= 1e6 else f"{size / 1e3:,.1f} kB"


def two_sizes(a: int, b: int) -> tuple[str, str]:
    """``a`` and ``b`` in one unit, the largest (GB, MB, kB) that tells them apart (exact bytes
    where none does): never "0.0 GB" against "0.0 GB" for two different sizes."""
    for scale, unit, digits in ((1e9, "GB", 2), (1e6, "MB", 1), (1e3, "kB", 1)):
        if max(a, b) < scale and unit != "kB":
            continue
        pair = (f"{a / scale:,.{digits}f} {unit}", f"{b / scale:,.{digits}f} {unit}")
        if pair[0] != pair[1] or a == b:
            return pair
    return f"{a:,} bytes", f"{b:,} bytes"


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """``algorithm``'s hex digest of the file at ``path``, read in 1 MiB chunks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def mismatch(path: str, resource: Resource) -> str | None:
    """How the file at ``path`` differs from ``resource``'s recorded size and digest (None: it
    does not)."""
    size = os.path.getsize(path)
    if resource.size and size != resource.size:
        return f"size {size:,} bytes, expected {resource.size:,}"
    if resource.digest:  # a source with no published digest is checked after extraction
        algorithm, expected = resource.digest.split(":", 1)
        got = file_digest(path, algorithm)
        if got != expected:
            return f"{algorithm} {got}, expected {expected}"
    return None


def check_file(path: str, resource: Resource, source: str) -> None:
    """Delete ``path`` and raise one line if its size or digest differs from ``resource``'s."""
    problem = mismatch(path, resource)
    if problem:
        os.remove(path)
        raise DataError(
            f"{resource.basename} from {source} does not match its recorded checksum ({problem}): "
            f"deleted {path}; download it again, or check the mirror or folder it came from; "
            + CHECKSUMS_HINT
        )


def check_free_space(folder: str, needed: int) -> None:
    """One line if ``folder``'s file system has less than ``needed`` bytes free."""
    os.makedirs(folder, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if needed > free:
        has, needs = two_sizes(free, needed)
        raise DataError(
            f"{folder} has {has} free but needs {needs}: free space there or pass another "
            "--download_dir / --data_dir"
        )


class TooSlow(ConnectionError):
    """The transfer stalled or trickled below the minimum rate (retried; each counts as a failed
    attempt even when it brought some bytes)."""


class TooLarge(DataError):
    """The server sent more than the file's bound: the part is deleted, not retried."""


def _transient(e: BaseException) -> bool:
    """Worth another attempt: the server or the network, not the request or this machine."""
    if isinstance(e, urllib.error.HTTPError):
        return e.code >= 500 or e.code in (408, 429)
    transient = (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException)
    return isinstance(e, transient)


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


class _Redirects(urllib.request.HTTPRedirectHandler):
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


def _http_once(
    opener, url: str, part: str, resource: Resource, pace: Pace, limit: int, quiet: bool
) -> None:
    """One attempt: append the bytes after ``part``'s current size (or start over on a 200),
    never writing past ``limit`` bytes."""
    have = os.path.getsize(part) if os.path.exists(part) else 0
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = opener.open(request, timeout=pace.seconds)
    except urllib.error.HTTPError as e:
        if e.code != 416 or not have:
            raise
        if not resource.size or have == resource.size:
            return  # nothing after the part: it is whole (its checksum decides)
        os.remove(part)  # a part that does not fit this file: start again
        raise ConnectionError(
            f"{part} did not fit the file on the server: starting again"
        ) from None
    except urllib.error.URLError as e:
        if not isinstance(e.reason, TimeoutError):
            raise
        raise TooSlow(f"no answer for {pace.seconds:g} s") from None
    except TimeoutError:
        raise TooSlow(f"no answer for {pace.seconds:g} s") from None
    final = response.geturl()
    with response:
        if have and response.status != 206:
            have = 0  # the server sent the whole file again
        length = response.headers.get("Content-Length")
        if length and length.isdigit() and have + int(length) > limit:
            raise _too_large(
                final, part, limit, resource, f"announces {have + int(length):,} bytes,"
            )
        total = resource.size or (have + int(length) if length and length.isdigit() else 0)
        meter = _Meter(pace)
        try:
            with (
                open(part, "ab" if have else "wb") as out,
                _progress(total, have, resource.basename, quiet) as bar,
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
        # the connection closed early without an error: resume from here on the next attempt
        raise ConnectionError(f"connection closed at {got:,} of {resource.size:,} bytes")


def _copy_from(resource: Resource, from_dir: str, folder: str, dest: str) -> str:
    src = os.path.join(from_dir, resource.basename)
    if not os.path.isfile(src):
        raise DataError(
            f"{resource.basename} is not in --from={from_dir}: copy it there (official URL "
            f"{resource.url})"
        )
    check_free_space(folder, resource.size)
    part = dest + ".part"
    shutil.copyfile(src, part)
    check_file(part, resource, src)
    os.replace(part, dest)
    return dest


def _say(message: str, quiet: bool) -> None:
    if not quiet:
        print(f"lbtrain-data: {message}", file=sys.stderr)


def fetch(
    resource: Resource,
    folder: str,
    *,
    mirror: str = "",
    from_dir: str = "",
    retries: int = 5,
    backoff_s: float = 2.0,
    pace: Pace = Pace(),
    unsized_limit: int = UNSIZED_LIMIT,
    quiet: bool = False,
) -> str:
    """``resource`` as a checked file in ``folder`` (downloaded, resumed or copied as needed);
    returns its path. A file already there is checked, not fetched again; one that fails its
    check (or, with ``from_dir``, differs from the copy there) is replaced."""
    os.makedirs(folder, exist_ok=True)
    dest = os.path.join(folder, resource.basename)
    if os.path.exists(dest):
        from_copy = os.path.join(from_dir, resource.basename) if from_dir else ""
        if from_copy and os.path.isfile(from_copy) and not filecmp.cmp(dest, from_copy, False):
            _say(f"{dest} differs from {from_copy}: replacing it with that copy", quiet)
            os.remove(dest)
        else:
            problem = mismatch(dest, resource)
            if not problem:
                return dest
            os.remove(dest)
            _say(
                f"{dest} does not match its recorded checksum ({problem}): fetching it again", quiet
            )
    if from_dir:
        return _copy_from(resource, from_dir, folder, dest)
    url = f"{mirror.rstrip('/')}/{resource.basename}" if mirror else resource.url
    limit = resource.size or unsized_limit
    part = dest + ".part"
    have = os.path.getsize(part) if os.path.exists(part) else 0
    if have > limit:  # left by another file of this name
        os.remove(part)
        have = 0
    check_free_space(folder, max(0, resource.size - have))
    redirects = _Redirects(url)
    opener = urllib.request.build_opener(redirects)
    attempt = 0  # failed attempts in a row (one that moved the part on counts as the first)
    while True:
        before = os.path.getsize(part) if os.path.exists(part) else 0
        redirects.last = url
        try:
            _http_once(opener, url, part, resource, pace, limit, quiet)
            break
        except Exception as e:
            if not _transient(e):
                if not isinstance(e, (urllib.error.URLError, http.client.HTTPException)):
                    raise  # ours (TooLarge) or not the network's: a bug, with its traceback
            after = os.path.getsize(part) if os.path.exists(part) else 0
            moved = after > before and not isinstance(e, TooSlow)
            attempt = 1 if moved else attempt + 1
            if not _transient(e) or attempt > retries:
                raise _failed(url, redirects.last, e, attempt, part, after) from None
            wait = backoff_s * 2 ** (attempt - 1)
            _say(f"{resource.basename}: {_detail(e)}; retrying in {wait:.0f} s", quiet)
            time.sleep(wait)
    check_file(part, resource, redirects.last)
    os.replace(part, dest)
    return dest


def _detail(e: BaseException) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code}"
    if isinstance(e, urllib.error.URLError):
        return str(e.reason)
    return str(e) or type(e).__name__


def _failed(url: str, final: str, e: BaseException, attempt: int, part: str, kept: int):
    where = url if final == url else f"{final} (redirected from {url})"
    resume = f"the {kept:,} bytes kept in {part} resume on the next run; " if kept else ""
    return DataError(
        f"could not download {where} ({_detail(e)}; {attempt} failed attempt(s) in a row): "
        f"{resume}check the URL or the network, or fetch the file yourself and pass --from=FOLDER"
    )
