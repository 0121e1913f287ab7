"""Fetch one source file: resumable over HTTP (``Range``), retried with backoff, checked against
its recorded size and checksum before anything reads it.

A file is first written to ``<dest>.part``; an interrupted download leaves that part, and the next
call asks only for the bytes after it (a server that ignores ``Range`` answers 200 and the file
starts again). Only a complete file whose size and digest match is renamed to ``<dest>``: a file
that does not match is deleted and named in one :class:`~lbtrain.errors.DataError` line (expected,
got, URL). Transient failures (connection reset, timeout, HTTP 5xx, 429) are retried with
exponential backoff; anything else is one line. Free disk space is checked before the first byte.

``mirror``: take the file from ``<mirror>/<basename of the official URL>`` instead;
``from_dir``: copy it from ``<from_dir>/<basename>`` (a compute node without internet).
"""

from __future__ import annotations

import dataclasses
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


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """``algorithm``'s hex digest of the file at ``path``, read in 1 MiB chunks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def check_file(path: str, resource: Resource, source: str) -> None:
    """Delete ``path`` and raise one line if its size or digest differs from ``resource``'s."""
    size = os.path.getsize(path)
    problem = None
    if resource.size and size != resource.size:
        problem = f"size {size:,} bytes, expected {resource.size:,}"
    elif resource.digest:  # a source with no published digest is checked after extraction
        algorithm, expected = resource.digest.split(":", 1)
        got = file_digest(path, algorithm)
        if got != expected:
            problem = f"{algorithm} {got}, expected {expected}"
    if problem:
        os.remove(path)
        raise DataError(
            f"{resource.basename} from {source} does not match its recorded checksum ({problem}): "
            f"deleted {path}; download it again, or check the mirror or folder it came from"
        )


def check_free_space(folder: str, needed: int) -> None:
    """One line if ``folder``'s file system has less than ``needed`` bytes free."""
    os.makedirs(folder, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise DataError(
            f"{folder} has {free / 1e9:,.2f} GB free but needs {needed / 1e9:,.2f} GB: free space "
            "there or pass another --download_dir / --data_dir"
        )


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


def _http_once(url: str, part: str, resource: Resource, timeout: float, quiet: bool) -> None:
    """One attempt: append the bytes after ``part``'s current size (or start over on a 200)."""
    have = os.path.getsize(part) if os.path.exists(part) else 0
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code != 416 or not have:
            raise
        if not resource.size or have == resource.size:
            return  # nothing after the part: it is whole (its checksum decides)
        os.remove(part)  # a part that does not fit this file: start again
        raise ConnectionError(
            f"{part} did not fit the file on the server: starting again"
        ) from None
    with response:
        if have and response.status != 206:
            have = 0  # the server sent the whole file again
        length = response.headers.get("Content-Length")
        total = resource.size or (have + int(length) if length else 0)
        with (
            open(part, "ab" if have else "wb") as out,
            _progress(total, have, resource.basename, quiet) as bar,
        ):
            while chunk := response.read(CHUNK):
                out.write(chunk)
                bar.update(len(chunk))
    got = os.path.getsize(part)
    if resource.size and got < resource.size:
        # the connection closed early without an error: resume from here on the next attempt
        raise ConnectionError(f"connection closed at {got:,} of {resource.size:,} bytes")


def fetch(
    resource: Resource,
    folder: str,
    *,
    mirror: str = "",
    from_dir: str = "",
    retries: int = 5,
    backoff_s: float = 2.0,
    timeout_s: float = 60.0,
    quiet: bool = False,
) -> str:
    """``resource`` as a checked file in ``folder`` (downloaded, resumed or copied as needed);
    returns its path. A file already there is checked, not fetched again."""
    os.makedirs(folder, exist_ok=True)
    dest = os.path.join(folder, resource.basename)
    if os.path.exists(dest):
        check_file(dest, resource, dest)
        return dest
    if from_dir:
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
    url = f"{mirror.rstrip('/')}/{resource.basename}" if mirror else resource.url
    part = dest + ".part"
    have = os.path.getsize(part) if os.path.exists(part) else 0
    if resource.size and have > resource.size:  # left by another file of this name
        os.remove(part)
        have = 0
    check_free_space(folder, max(0, resource.size - have))
    attempt = 0  # failed attempts in a row (one that moved the part on counts as the first)
    while True:
        before = os.path.getsize(part) if os.path.exists(part) else 0
        try:
            _http_once(url, part, resource, timeout_s, quiet)
            break
        except Exception as e:
            if not _transient(e):
                if not isinstance(e, (urllib.error.URLError, http.client.HTTPException)):
                    raise  # not the network's: a bug, with its traceback
            after = os.path.getsize(part) if os.path.exists(part) else 0
            attempt = 1 if after > before else attempt + 1
            if not _transient(e) or attempt > retries:
                detail = f"HTTP {e.code}" if isinstance(e, urllib.error.HTTPError) else str(e)
                kept = (
                    f"the {after:,} bytes kept in {part} resume on the next run; " if after else ""
                )
                raise DataError(
                    f"could not download {url} ({detail}; {attempt} failed attempt(s) in a row): "
                    f"{kept}check the URL or the network, or fetch the file yourself and "
                    "pass --from=FOLDER"
                ) from None
            wait = backoff_s * 2 ** (attempt - 1)
            print(
                f"lbtrain-data: {resource.basename}: {e}; retrying in {wait:.0f} s",
                file=sys.stderr,
            )
            time.sleep(wait)
    check_file(part, resource, url)
    os.replace(part, dest)
    return dest
