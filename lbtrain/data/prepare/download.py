"""Fetch one source file: resumable over HTTP (``Range``), retried with backoff, bounded in bytes
and in time, checked against its recorded size and checksum before anything reads it.

A file is first written to ``<dest>.part``; an interrupted download leaves that part, and the next
call asks only for the bytes after it (a server that ignores ``Range`` answers 200 and the file
starts again). Only a complete file whose size and digest match is renamed to ``<dest>``: a file
that does not match is deleted and named in one :class:`~lbtrain.errors.DataError` line (expected,
got, URL). Transient failures (connection reset, HTTP 5xx, 408, 429, a stalled or trickling
transfer) are retried with exponential backoff; anything else (a URL urllib cannot use, no such
host or file, HTTP 404 or 403, a server whose whole file has another size than the recorded one)
is one line at once. Free disk space is checked before the first byte. A part that cannot be
continued (longer than the file can be, or not the start of the file it is continued from) is
discarded with one line, never left to block the next run.

Bounds: a download never writes past its recorded size (a file without one: past
:data:`UNSIZED_LIMIT`): at the first byte beyond it the part is deleted and the download fails in
one line. A transfer slower than ``speed_limit`` bytes/s for ``speed_time`` seconds, or silent for
``speed_time`` seconds, is cut and retried (curl's ``--speed-limit`` / ``--speed-time``). Every
error names the URL finally fetched, after redirects. One HTTP attempt is
:func:`~lbtrain.data.prepare.transfer.attempt`.

``mirror``: take the file from ``<mirror>/<basename of the official URL>`` instead;
``from_dir``: copy it from ``<from_dir>/<basename>`` (a compute node without internet): a copy
whose size differs from the recorded one is refused before its first byte, and no byte past that
size is copied; a different file of that name already in the download folder is replaced by that
copy.
"""

from __future__ import annotations

import dataclasses
import errno
import filecmp
import hashlib
import http.client
import os
import shutil
import time
import urllib.error
import urllib.request

from lbtrain.data.prepare.transfer import (
    CHECKSUMS_HINT,
    CHUNK,
    Pace,
    Redirects,
    TooSlow,
    attempt,
    say,
    transient,
)
from lbtrain.errors import DataError

UNSIZED_LIMIT = 2 * 10**9  # bytes: the most written of a file whose size is not recorded


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


def _same_start(part: str, src: str, n: int) -> bool:
    """Whether the first ``n`` bytes of ``part`` and ``src`` are equal."""
    with open(part, "rb") as a, open(src, "rb") as b:
        while n > 0:
            chunk = a.read(min(CHUNK, n))
            if not chunk or chunk != b.read(len(chunk)):
                return False
            n -= len(chunk)
    return True


def _resumable_part(part: str, src: str, size: int, quiet: bool) -> int:
    """The bytes of ``part`` a copy of ``src`` (``size`` bytes) continues from; a part that is
    longer or not its start is discarded (one line)."""
    if not os.path.exists(part):
        return 0
    have = os.path.getsize(part)
    if have <= size and _same_start(part, src, have):
        return have
    os.remove(part)
    say(f"{part} ({have:,} bytes) is not the start of {src}: discarded, copying it anew", quiet)
    return 0


def _copy_bytes(src: str, part: str, start: int, limit: int) -> None:
    """``src`` from byte ``start`` on, appended to ``part``; a source that grows past ``limit``
    bytes while it is copied is stopped there."""
    try:
        with open(src, "rb") as source, open(part, "ab" if start else "wb") as out:
            source.seek(start)
            written = start
            while chunk := source.read(CHUNK):
                if written + len(chunk) > limit:
                    out.close()
                    os.remove(part)
                    raise DataError(
                        f"{src} grew past {limit:,} bytes while it was copied: stopped and "
                        f"deleted {part}"
                    )
                out.write(chunk)
                written += len(chunk)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(e.errno, e.strerror, part) from None  # the file written, not the source
        raise


def _copy_from(
    resource: Resource, from_dir: str, folder: str, dest: str, limit: int, quiet: bool
) -> str:
    """``from_dir``'s copy of ``resource``, checked, as ``dest``. Its size is compared with the
    recorded one before a byte is copied, and no byte past ``limit`` is copied."""
    src = os.path.join(from_dir, resource.basename)
    if not os.path.isfile(src):
        raise DataError(
            f"{resource.basename} is not in --from={from_dir}: copy it there (official URL "
            f"{resource.url})"
        )
    size = os.path.getsize(src)
    if (resource.size and size != resource.size) or size > limit:
        recorded = (
            f"{resource.size:,} bytes are recorded for {resource.basename}"
            if resource.size
            else f"{resource.basename} has no recorded size and is taken up to {limit:,} bytes"
        )
        raise DataError(
            f"{src} is {size:,} bytes, but {recorded}: it is not the file recorded for it, and "
            f"nothing was copied; {CHECKSUMS_HINT}"
        )
    part = dest + ".part"
    have = _resumable_part(part, src, size, quiet)
    check_free_space(folder, size - have)
    _copy_bytes(src, part, have, limit)
    check_file(part, resource, src)
    os.replace(part, dest)
    return dest


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
    check (or, with ``from_dir``, differs from the copy there) is replaced. A Ctrl-C
    (``KeyboardInterrupt``) leaves a note on the exception saying what part is kept."""
    os.makedirs(folder, exist_ok=True)
    dest = os.path.join(folder, resource.basename)
    if os.path.exists(dest):
        from_copy = os.path.join(from_dir, resource.basename) if from_dir else ""
        if from_copy and os.path.isfile(from_copy) and not filecmp.cmp(dest, from_copy, False):
            say(f"{dest} differs from {from_copy}: replacing it with that copy", quiet)
            os.remove(dest)
        else:
            problem = mismatch(dest, resource)
            if not problem:
                return dest
            os.remove(dest)
            say(
                f"{dest} does not match its recorded checksum ({problem}): fetching it again", quiet
            )
    limit = resource.size or unsized_limit
    part = dest + ".part"
    try:
        if from_dir:
            return _copy_from(resource, from_dir, folder, dest, limit, quiet)
        url = f"{mirror.rstrip('/')}/{resource.basename}" if mirror else resource.url
        return _download(resource, url, folder, part, limit, retries, backoff_s, pace, quiet)
    except KeyboardInterrupt as e:
        kept = os.path.getsize(part) if os.path.exists(part) else 0
        if kept:
            e.add_note(f"the {kept:,} bytes of {part} resume on the next prepare")
        raise


def _download(
    resource: Resource,
    url: str,
    folder: str,
    part: str,
    limit: int,
    retries: int,
    backoff_s: float,
    pace: Pace,
    quiet: bool,
) -> str:
    """``resource`` from ``url`` into ``part``, then checked and renamed to its final name."""
    have = os.path.getsize(part) if os.path.exists(part) else 0
    if have > limit:  # left by another file of this name
        os.remove(part)
        say(
            f"{part} ({have:,} bytes) is longer than {resource.basename} can be ({limit:,} "
            "bytes): discarded, downloading it anew",
            quiet,
        )
        have = 0
    check_free_space(folder, max(0, resource.size - have))
    redirects = Redirects(url)
    opener = urllib.request.build_opener(redirects)
    failed = 0  # failed attempts in a row (one that moved the part on counts as the first)
    while True:
        before = os.path.getsize(part) if os.path.exists(part) else 0
        redirects.last = url
        try:
            attempt(opener, url, part, resource, pace, limit, quiet)
            break
        except Exception as e:
            if not transient(e):
                if not isinstance(e, (urllib.error.URLError, http.client.HTTPException)):
                    raise  # ours (TooLarge, WrongFile), or a bug with its traceback
            after = os.path.getsize(part) if os.path.exists(part) else 0
            moved = after > before and not isinstance(e, TooSlow)
            failed = 1 if moved else failed + 1
            if not transient(e) or failed > retries:
                raise _failed(url, redirects.last, e, failed, part, after) from None
            wait = backoff_s * 2 ** (failed - 1)
            say(f"{resource.basename}: {_detail(e)}; retrying in {wait:.0f} s", quiet)
            time.sleep(wait)
    check_file(part, resource, redirects.last)
    dest = part.removesuffix(".part")
    os.replace(part, dest)
    return dest


def _detail(e: BaseException) -> str:
    if isinstance(e, urllib.error.HTTPError):
        return f"HTTP {e.code}"
    if isinstance(e, urllib.error.URLError):
        return str(e.reason)
    return str(e) or type(e).__name__


def _failed(url: str, final: str, e: BaseException, attempts: int, part: str, kept: int):
    where = url if final == url else f"{final} (redirected from {url})"
    resume = f"the {kept:,} bytes kept in {part} resume on the next run; " if kept else ""
    return DataError(
        f"could not download {where} ({_detail(e)}; {attempts} failed attempt(s) in a row): "
        f"{resume}check the URL or the network, or fetch the file yourself and pass --from=FOLDER"
    )
