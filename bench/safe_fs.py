"""Files below a folder, reached without following a link: the one place for descriptor-relative I/O.

Used wherever a tree may hold links somebody else planted: the dataset generated or staged onto the
storage under test, and the output folder a run (possibly on a cluster) leaves behind. The folder as
given is opened normally (a link in that path is the user's choice, e.g. a mount); every name below
it is opened relative to its parent's descriptor with O_NOFOLLOW, so a planted link, or one swapped in
while the work runs, can redirect neither a write, a rename or a deletion, nor make a read return
another file or block on a device or FIFO.

What is read back from such a tree is input from whoever wrote it: `read_json` is the one reader of a
run folder's JSON (a rank record, a summary, a state file, a probe result), bounded, regular files
only, a JSON object with the keys and types its caller expects; `reason_text` bounds what of it (or
of a log) may reach a failure reason, which travels into state files, task logs, results rows and
alert e-mails.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import NoReturn

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# How much of a log's end is read to show its tail: a log of any size (or a runaway one) costs this much.
TAIL_BYTES = 64 << 10
# What of a text read back (a log line, a rank's error, a state file's reason) a failure reason may hold:
# enough to say why, too little to carry a file or an environment (issue 61, item 1).
REASON_CHARS = 400


class RefusedFile(OSError):
    """A name is not read: a link, not a regular file (a device, a FIFO, a folder) or larger than allowed.

    An OSError, so code that already treats an unreadable file as absent or "(unreadable)" handles it.
    """


@dataclass(frozen=True)
class Refusal:
    """How a tree's owner words refusing a name: staging and generation name different remedies.

    `error` is raised for a link (with `remedy` after "is a symbolic link; ") and for the wrong kind of
    entry; `not_a_folder`, where given, instead of it when a non-folder stands where a folder must be,
    so a caller can tell "skip" from "refuse".
    """

    error: type[Exception]
    remedy: str
    not_a_folder: type[Exception] | None = None

    def refuse(self, dir_fd: int, name: str, path: Path, want: str) -> NoReturn:
        """Raise for `name` in `dir_fd`, which could not be opened as a `want` ("directory", "regular file")."""
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            raise self.error(f"{path}: is a symbolic link; {self.remedy}")
        kind = self.not_a_folder if want == "directory" and self.not_a_folder else self.error
        raise kind(f"{path}: is not a {want}")


# Results a run left behind: a link, device or FIFO there is never read, only reported as such.
RESULTS = Refusal(RefusedFile, "not followed (results are read without following links)")


def parts(rel: str, refusal: Refusal) -> tuple[str, ...]:
    """The names of `rel`, refused unless it is a plain relative path that stays inside its tree."""
    path = PurePosixPath(rel)
    names = path.parts
    if not names or path.is_absolute() or any(p in ("", ".", "..") for p in names):
        raise refusal.error(f"{rel!r}: not a path inside the tree")
    return names


@contextlib.contextmanager
def open_root(path: Path) -> Iterator[int]:
    """Descriptor of a tree's top folder as given (links in that path are the user's, e.g. a mount)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """The entry itself (never a link's target), or None when nothing has that name."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_dir(dir_fd: int, name: str, path: Path, refusal: Refusal, create: bool = False) -> int:
    """Descriptor of the folder `name` in `dir_fd`, made first with create; a link there is refused, naming `path`."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, dir_fd=dir_fd)
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            refusal.refuse(dir_fd, name, path, "directory")
        raise


@contextlib.contextmanager
def parent(root_fd: int, root: Path, rel: str, refusal: Refusal, create: bool = False) -> Iterator[tuple[int, str]]:
    """(descriptor of rel's folder, rel's last name), reached from root_fd without following a link.

    With create, missing folders are made on the way. A link (or a file) where a folder should be is
    refused naming it: nothing beyond it is ever opened.
    """
    names = parts(rel, refusal)
    fd = os.dup(root_fd)
    try:
        for i, name in enumerate(names[:-1]):
            child = open_dir(fd, name, root.joinpath(*names[: i + 1]), refusal, create)
            os.close(fd)
            fd = child
        yield fd, names[-1]
    finally:
        os.close(fd)


def open_regular(dir_fd: int, name: str, path: Path, refusal: Refusal) -> int:
    """A read descriptor on a regular file, never through a link, never blocking on a FIFO or device."""
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        if error.errno == errno.ELOOP:
            refusal.refuse(dir_fd, name, path, "regular file")
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        refusal.refuse(dir_fd, name, path, "regular file")
    return fd


def create_exclusive(dir_fd: int, name: str, mode: int = 0o644) -> int:
    """A fresh file at name: a stale entry there (a link itself, never its target) is removed first.

    O_EXCL|O_NOFOLLOW: should a link be planted again between the removal and the open, the open fails
    instead of writing through it.
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
    return os.open(name, CREATE_FLAGS, mode, dir_fd=dir_fd)


def write_atomic(dir_fd: int, name: str, data: bytes, fsync: bool = False) -> None:
    """Write `name` in `dir_fd` all at once: a hidden temp file, then a rename within the folder.

    The rename replaces a link at `name` (the link, never its target); a reader sees the old file or
    the whole new one. fsync where the file must survive a crash (a manifest), not for bulk data.
    """
    tmp = f".{name}.tmp"
    try:
        with os.fdopen(create_exclusive(dir_fd, tmp), "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    finally:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(tmp, dir_fd=dir_fd)


def write_file(path: Path, data: bytes | str, fsync: bool = False) -> None:
    """`write_atomic` by path: the file `path`, written whole through a hidden temp file that is never a
    planted link's target, then renamed over the name (a link there is replaced, never written through).
    Its folder is opened without following a link at the folder's own name (a run folder's `metrics/`,
    `ranks/` or `logs/` swapped for a link is refused, naming it); links above it are the user's (a mount)."""
    try:
        dir_fd = os.open(path.parent, DIR_FLAGS)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise RefusedFile(error.errno, f"{path.parent}: a link or a file where a folder is expected") from error
        raise
    try:
        write_atomic(dir_fd, path.name, data.encode() if isinstance(data, str) else data, fsync)
    finally:
        os.close(dir_fd)


def open_append(path: Path):
    """`path` opened to append (a log), created 0644 if missing, never through a link at its name or at
    its folder's name."""
    dir_fd = os.open(path.parent, DIR_FLAGS)
    try:
        fd = os.open(
            path.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd
        )
    finally:
        os.close(dir_fd)
    return os.fdopen(fd, "ab")


@contextlib.contextmanager
def _open_below(root: Path, rel: str) -> Iterator[int]:
    """Read descriptor on the regular file `rel` under `root`, no component below `root` followed."""
    with open_root(root) as root_fd, parent(root_fd, root, rel, RESULTS) as (dir_fd, name):
        fd = open_regular(dir_fd, name, root / rel, RESULTS)
    try:
        yield fd
    finally:
        os.close(fd)


def read_bounded(root: Path, rel: str, limit: int) -> bytes:
    """The whole of a small file under `root` (a summary, a rank record); RefusedFile past `limit` bytes."""
    with _open_below(root, rel) as fd:
        data = _pread(fd, limit + 1, 0)
    if len(data) > limit:
        raise RefusedFile(f"{root / rel}: larger than {limit} bytes; not read")
    return data


def read_tail(root: Path, rel: str, limit: int = TAIL_BYTES) -> bytes:
    """At most the last `limit` bytes of a regular file under `root`: a log's end, whatever its size."""
    with _open_below(root, rel) as fd:
        size = os.fstat(fd).st_size
        start = max(0, size - limit)
        return _pread(fd, min(limit, size - start), start)


def _pread(fd: int, size: int, offset: int) -> bytes:
    """Up to `size` bytes from `offset`: a short read (a network file system may give one) is continued."""
    chunks: list[bytes] = []
    while size > 0 and (chunk := os.pread(fd, size, offset)):
        chunks.append(chunk)
        size, offset = size - len(chunk), offset + len(chunk)
    return b"".join(chunks)


def regular_files(root: Path, rel: str) -> list[str]:
    """Names of the regular files in folder `rel` under `root`, sorted: links, FIFOs and devices left out.

    An absent folder lists nothing; a link where the folder should be is refused (RefusedFile).
    """
    try:
        with open_root(root) as root_fd, parent(root_fd, root, rel, RESULTS) as (dir_fd, name):
            fd = open_dir(dir_fd, name, root / rel, RESULTS)
    except FileNotFoundError:
        return []
    try:
        return sorted(n for n in os.listdir(fd) if (st := lstat_at(fd, n)) and stat.S_ISREG(st.st_mode))
    finally:
        os.close(fd)


class MalformedFile(ValueError):
    """A file read back is not the JSON object its reader expects: not JSON, not an object, a key missing
    or of the wrong type. Its message names the file and the key, never the file's content."""


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a value a result may hold")


def _check_key(doc: dict, key: str, kind: type | tuple[type, ...], where: Path) -> None:
    """MalformedFile unless doc[key] is a `kind` (a bool is never taken for an int or a float)."""
    if key not in doc:
        raise MalformedFile(f"{where}: no {key!r} field")
    kinds = kind if isinstance(kind, tuple) else (kind,)
    value = doc[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise MalformedFile(f"{where}: field {key!r} is {type(value).__name__}, not {names}")


def read_json(root: Path, rel: str, limit: int, required: Mapping[str, type | tuple[type, ...]] | None = None) -> dict:
    """The JSON object in the regular file `rel` under `root`, read as `read_bounded` reads (no link
    followed, no FIFO or device opened for reading, at most `limit` bytes), with each key of `required`
    present and of its type. NaN and Infinity are refused, as strict JSON has neither.

    Raises FileNotFoundError (absent), RefusedFile (a link, not a regular file, over `limit`) or
    MalformedFile (the content), each naming the file.
    """
    where = root / rel
    data = read_bounded(root, rel, limit)
    try:
        doc = json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, UnicodeDecodeError, nesting too deep
        raise MalformedFile(f"{where}: not JSON ({reason_text(error, 80)})") from None
    if not isinstance(doc, dict):
        raise MalformedFile(f"{where}: holds a JSON {type(doc).__name__}, not an object")
    for key, kind in (required or {}).items():
        _check_key(doc, key, kind, where)
    return doc


def reason_text(text: object, limit: int = REASON_CHARS) -> str:
    """`text` as a failure reason may carry it: printable characters only (a line break, an escape
    sequence or any other control character becomes a space), runs of spaces folded, at most `limit`
    characters (a cut one ends in "...")."""
    printable = "".join(c if c.isprintable() else " " for c in str(text))
    folded = " ".join(printable.split())
    return folded if len(folded) <= limit else folded[: max(0, limit - 3)] + "..."
