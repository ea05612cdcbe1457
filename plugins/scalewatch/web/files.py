"""Which files of a run folder are web content, and opening them without leaving the folder.

Only what a report needs is served: the report page, the results CSV and the Data Docs site's pages,
styles, images and fonts. Run specs, handles, state files, rank logs and metrics stay on disk for the
suite and the task logs. No script is served: the report runs none, and the Data Docs pages, whose
<script> tags name the bundled jQuery, Bootstrap and Vega, are served under a CSP without script-src,
so Chromium never requests them (checked on a real Data Docs site). A .js served here would be a
same-origin script for any page on Airflow's origin whose CSP allows 'self' (one planted in a run folder
included), and nothing of ours would use it.
Any path trick (`..`, an encoded slash, an absolute path, a symlink anywhere on the way) is a 404.

Files are opened, never looked at and then reopened by path: each component is opened relative to
its parent's descriptor with O_NOFOLLOW (a symlink swapped in at any moment fails the open), the
file's own descriptor is checked with fstat (a regular file) and the response streams from it. A
check-then-open served a symlink flipped in between (40 times in 300 requests).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

RUN_DIR_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
SEGMENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,254}")
TOP_LEVEL = {"report.html", "results.csv"}
DATA_DOCS = "data-docs"
MEDIA_TYPES = {  # fixed here, not guessed from the host's mime.types; no script, JSON or source map
    ".html": "text/html; charset=utf-8",
    ".csv": "text/csv; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".ico": "image/x-icon",
    ".woff": "font/woff",
    ".woff2": "font/woff2",
    ".ttf": "font/ttf",
}
DATA_DOCS_SUFFIXES = set(MEDIA_TYPES) - {".csv"}
SUITE_FILE = "suite.json"  # {"dag_id", "run_id"}: which DAG's permission guards this run's pages
SUITE_FILE_MAX = 64 * 1024
SUITE_KEYS = ("dag_id", "run_id", "verdict", "started_at")  # the only keys a page takes from it
CHUNK = 256 * 1024

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted under a served name returns at once (fstat then refuses it)
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY

BASE_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "private, no-store"}
# Served content runs no script (a sandbox without allow-scripts, default-src 'none'): HTML or SVG
# planted in a run folder cannot act on Airflow's origin as the reader. The report needs only its
# inline styles and inline SVG, and is also its own opaque origin. Data Docs pages load their bundled
# CSS, images and fonts from the folder, behind the same login: an opaque origin's requests carry no
# SameSite session cookie (Chromium then blocked the CSS: 401), so their pages keep the origin
# (allow-same-origin, still no script, form or popup).
_CONTENT = (
    "default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; "
    "form-action 'none'; base-uri 'none'; frame-ancestors 'self'"
)
REPORT_CSP = f"sandbox; {_CONTENT}"
DATA_DOCS_PAGE_CSP = f"sandbox allow-same-origin; {_CONTENT}"
DOWNLOAD_CSP = "sandbox; default-src 'none'; frame-ancestors 'self'"


class NotServed(Exception):
    """The path is not web content of this run (or does not exist): always answered 404."""


@dataclass
class OpenedFile:
    """An open served file: its descriptor (owned: closed by the response) and its fstat."""

    fd: int
    size: int
    mtime: float
    name: str

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def check_run(run: str) -> str:
    if not RUN_DIR_RE.fullmatch(run) or ".." in run:
        raise NotServed(run)
    return run


def check_path(rel: str) -> list[str]:
    """The components of a servable path inside a run folder (whitelisted names only)."""
    parts = rel.split("/")
    if not parts or any(not SEGMENT_RE.fullmatch(p) or ".." in p for p in parts):
        raise NotServed(rel)
    if len(parts) == 1:
        if parts[0] not in TOP_LEVEL:
            raise NotServed(rel)
    elif parts[0] != DATA_DOCS or Path(parts[-1]).suffix.lower() not in DATA_DOCS_SUFFIXES:
        raise NotServed(rel)
    return parts


def _open_at(dir_fd: int, name: str, flags: int) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError:  # ELOOP (a symlink), ENOTDIR, ENOENT, EACCES, ENXIO: all the same to a reader
        raise NotServed(name) from None


@contextlib.contextmanager
def run_folder(root: Path, run: str) -> Iterator[int]:
    """The run folder's descriptor, opened under the reports root without following a link."""
    check_run(run)
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise NotServed(run) from None
    try:
        fd = _open_at(root_fd, run, _DIR)
    finally:
        os.close(root_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def open_in(run_fd: int, parts: list[str]) -> OpenedFile:
    """Open `parts` under a run folder's descriptor: every component O_NOFOLLOW, a regular file at the end."""
    fd = os.dup(run_fd)
    try:
        for part in parts[:-1]:
            child = _open_at(fd, part, _DIR)
            os.close(fd)
            fd = child
        file_fd = _open_at(fd, parts[-1], _FILE)
    finally:
        os.close(fd)
    st = os.fstat(file_fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(file_fd)
        raise NotServed("/".join(parts))
    os.set_blocking(file_fd, True)
    return OpenedFile(file_fd, st.st_size, st.st_mtime, parts[-1])


def is_served(root: Path, run: str, rel: str) -> bool:
    """Whether `run/rel` would be served now (a link on a page to a file that exists)."""
    try:
        parts = check_path(rel)
        with run_folder(root, run) as fd:
            open_in(fd, parts).close()
        return True
    except NotServed:
        return False


def suite_of(run_fd: int) -> dict[str, str | None]:
    """The DAG and run that produced this folder (strings or None, never other keys); a run made
    outside Airflow (bench sweep) has none. Read through the folder's descriptor like any served file."""
    try:
        opened = open_in(run_fd, [SUITE_FILE])
    except NotServed:
        return dict.fromkeys(SUITE_KEYS)
    try:
        doc = json.loads(os.read(opened.fd, SUITE_FILE_MAX)) if opened.size <= SUITE_FILE_MAX else {}
    except (OSError, ValueError):
        doc = {}
    finally:
        opened.close()
    doc = doc if isinstance(doc, dict) else {}
    return {k: doc[k] if isinstance(doc.get(k), str) and doc[k] else None for k in SUITE_KEYS}


def reports(root: Path) -> Iterator[tuple[str, float, dict]]:
    """(folder name, report mtime, suite) of every run folder with a servable report, any order."""
    try:
        names = [e.name for e in os.scandir(root) if RUN_DIR_RE.fullmatch(e.name) and ".." not in e.name]
    except OSError:
        return
    for name in names:
        try:
            with run_folder(root, name) as fd:
                report = open_in(fd, ["report.html"])
                report.close()
                yield name, report.mtime, suite_of(fd)
        except NotServed:
            continue


def headers_for(parts: list[str]) -> dict[str, str]:
    """nosniff, no caching and a CSP on every served file; report and Data Docs content sandboxed."""
    if parts == ["results.csv"]:
        csp = DOWNLOAD_CSP
    elif parts[0] == DATA_DOCS and Path(parts[-1]).suffix.lower() == ".html":
        csp = DATA_DOCS_PAGE_CSP
    else:  # the report, and Data Docs' assets (an SVG or a stylesheet opened on its own included)
        csp = REPORT_CSP
    return {**BASE_HEADERS, "Content-Security-Policy": csp}


class DescriptorResponse(Response):
    """Streams an opened file from its descriptor (never reopened by path) and closes it, sent or not."""

    def __init__(self, opened: OpenedFile, parts: list[str]) -> None:
        media = MEDIA_TYPES.get(Path(opened.name).suffix.lower(), "application/octet-stream")
        super().__init__(
            content=None,
            media_type=media,
            headers={**headers_for(parts), "content-length": str(opened.size)},
        )
        self.opened = opened

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            offset = 0
            while scope.get("method") != "HEAD" and offset < self.opened.size:
                want = min(CHUNK, self.opened.size - offset)
                chunk = await anyio.to_thread.run_sync(os.pread, self.opened.fd, want, offset)
                if not chunk:  # truncated since fstat: the response ends short, the server closes it
                    break
                offset += len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.opened.close()
