"""Copy a dataset onto the storage under test, verified, resumable, with a manifest.

Each file goes to a hidden partial name, is hashed while copied, checked against the source's stat
taken before and after, fsynced and renamed: a file is either fully staged or absent. A journal of
finished files makes a rerun after an interruption skip them once their bytes still hash to what
was copied (size and mtime alone never do); the manifest is written last, so a tree with a manifest
is a complete, verified copy.

No link is followed below `--from` or `--to` (the two paths as given may pass through links, e.g.
a mount): every file is reached through directory descriptors opened with O_NOFOLLOW, so a link
planted in the staged tree, or swapped in while staging runs, can neither redirect a write, a
deletion or a read outside it. A link in the source, or on a path staging must write, delete or
read in the target, is refused with an error naming it; partial and temporary files are created
with O_EXCL|O_NOFOLLOW after removing whatever stale entry (a link itself, never its target) holds
the name. The descriptor-relative helpers are bench.safe_fs's, shared with dataset generation.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.errors import DatasetError, StagingError
from bench.safe_fs import (
    READ_FLAGS,
    Refusal,
    create_exclusive,
    lstat_at,
    open_regular,
    open_root,
    parent,
    parts,
    write_atomic,
)

MANIFEST = "MANIFEST.json"
JOURNAL = ".scalewatch-stage.jsonl"
MANIFEST_VERSION = 1
CHUNK = 4 << 20
_SKIP = {MANIFEST, JOURNAL}
_NO_LINKS = "staging follows no links inside the staged tree (remove it and rerun)"


@dataclass(frozen=True)
class StageResult:
    files: int
    bytes: int
    copied: int
    skipped: int
    manifest: Path


def source_files(src: Path) -> list[Path]:
    """Regular files under src, hidden names skipped; a link anywhere in the tree is refused, naming it."""
    if not src.is_dir():
        raise StagingError(f"--from {src}: not a readable directory")
    files = []
    for path in sorted(src.rglob("*")):  # rglob lists links but never descends into them
        rel = path.relative_to(src)
        if rel.name in _SKIP or any(part.startswith(".") for part in rel.parts):
            continue
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            raise StagingError(
                f"{path}: is a symbolic link; staging copies no links (put the file or folder itself in the dataset)"
            )
        if stat.S_ISREG(mode):
            if not os.access(path, os.R_OK):
                raise StagingError(f"{path}: source file is not readable")
            files.append(path)
    if not files:
        raise StagingError(f"--from {src}: no files to stage")
    return files


def _sha256_fd(fd: int) -> str:
    """Hash of the open file, which is then closed."""
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _stat_key(st: os.stat_result) -> tuple[int, int]:
    return st.st_size, st.st_mtime_ns


class _NotAFolder(StagingError):
    """Something other than a folder or a link stands where a folder of the path should be."""


# Staging's wording of a refusal: a link is refused with its remedy; a file where a folder belongs is
# told apart (_NotAFolder), so removing stale files can skip it.
_REFUSAL = Refusal(StagingError, _NO_LINKS, _NotAFolder)


def _parts(rel: str) -> tuple[str, ...]:
    """rel's names; a path that would leave the tree (absolute, '..') is a StagingError."""
    return parts(rel, _REFUSAL)


def _parent(
    root_fd: int, root: Path, rel: str, create: bool = False
) -> contextlib.AbstractContextManager[tuple[int, str]]:
    """(descriptor of rel's folder, rel's last name), no link followed; see bench.safe_fs.parent."""
    return parent(root_fd, root, rel, _REFUSAL, create)


def _refuse(dir_fd: int, name: str, path: Path, want: str) -> None:
    """Raises StagingError for a name staging may not open: a link, or not the kind it wants there."""
    _REFUSAL.refuse(dir_fd, name, path, want)


def _open_regular(dir_fd: int, name: str, path: Path) -> int:
    """A read descriptor on a regular file, never through a link, never blocking on a FIFO."""
    return open_regular(dir_fd, name, path, _REFUSAL)


def _copy_one(src_fd: int, src: Path, dst_fd: int, dst: Path, rel: str) -> tuple[str, os.stat_result]:
    """Copy with hashing: (sha256, the source's stat); raises StagingError naming the file, leaving no partial."""
    source, target = src / rel, dst / rel
    try:
        with _parent(src_fd, src, rel) as (sdir, sname), _parent(dst_fd, dst, rel, create=True) as (ddir, dname):
            return _copy_at(sdir, sname, ddir, dname, source)
    except PermissionError as error:
        raise StagingError(f"{source}: cannot read ({error.strerror})") from None
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StagingError(
                f"{target}: destination is full ({error.strerror}); nothing recorded as staged"
            ) from None
        raise StagingError(f"{target}: copy failed ({error.strerror})") from None


def _copy_at(sdir: int, sname: str, ddir: int, dname: str, source: Path) -> tuple[str, os.stat_result]:
    partial = f".{dname}.partial"
    try:
        with os.fdopen(_open_regular(sdir, sname, source), "rb") as fin:
            before = os.fstat(fin.fileno())
            h = hashlib.sha256()
            with os.fdopen(create_exclusive(ddir, partial), "wb") as fout:  # O_EXCL|O_NOFOLLOW: never through a link
                while chunk := fin.read(CHUNK):
                    h.update(chunk)
                    fout.write(chunk)
                fout.flush()
                os.fsync(fout.fileno())
        after = lstat_at(sdir, sname)
        if after is None or (after.st_ino, *_stat_key(after)) != (before.st_ino, *_stat_key(before)):
            raise StagingError(f"{source}: source file changed during staging; rerun to stage it again")
        os.replace(partial, dname, src_dir_fd=ddir, dst_dir_fd=ddir)  # replaces a link at dname, never follows it
        return h.hexdigest(), before
    finally:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(partial, dir_fd=ddir)


def _staged_digest(dst_fd: int, dst: Path, rel: str, size: int) -> str | None:
    """sha256 of the staged file if it is a regular file of `size` bytes (a link there is not read)."""
    try:
        with _parent(dst_fd, dst, rel) as (ddir, dname):
            st = lstat_at(ddir, dname)
            if st is None or not stat.S_ISREG(st.st_mode) or st.st_size != size:
                return None
            return _sha256_fd(_open_regular(ddir, dname, dst / rel))
    except FileNotFoundError:
        return None


def _read_control(dir_fd: int, name: str, path: Path) -> str | None:
    """Text of the journal or manifest, or None if absent; a link there is refused, not read."""
    if lstat_at(dir_fd, name) is None:
        return None
    with os.fdopen(_open_regular(dir_fd, name, path), "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def _read_journal(text: str | None) -> dict[str, dict]:
    done: dict[str, dict] = {}
    for line in (text or "").splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a torn last line from an interrupted run
            entry = json.loads(line)
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                done[entry["path"]] = entry
    return done


def owned_files(dst: Path) -> set[str]:
    """Files under `dst` that scalewatch wrote (its manifest and journal list them); refuses a foreign tree.

    Staging replaces what it staged before and nothing else: a non-empty folder that carries neither
    a manifest nor a journal of ours is somebody's data, and is never written into.
    """
    if not dst.exists():
        return set()
    if not dst.is_dir():
        raise StagingError(f"--to {dst}: exists and is not a directory")
    with open_root(dst) as fd:
        return _owned(fd, dst)


def _owned(dst_fd: int, dst: Path) -> set[str]:
    manifest = _read_control(dst_fd, MANIFEST, dst / MANIFEST)
    journal = _read_control(dst_fd, JOURNAL, dst / JOURNAL)
    if manifest is None and journal is None:
        if os.listdir(dst_fd):
            raise StagingError(
                f"--to {dst}: not empty and holds no scalewatch {MANIFEST} or {JOURNAL}; refusing to stage "
                "into a folder scalewatch did not create (pick an empty or new folder)"
            )
        return set()
    owned = set(_read_journal(journal))
    if manifest is not None:  # a torn manifest: only the journal's files count as ours
        with contextlib.suppress(json.JSONDecodeError, AttributeError, TypeError):
            owned |= set(json.loads(manifest).get("files", {}))
    return owned


def stage(src: Path, dst: Path, progress: Callable[[str], None] | None = None) -> StageResult:
    files = source_files(src)
    owned = owned_files(dst)
    dst.mkdir(parents=True, exist_ok=True)
    with open_root(src) as src_fd, open_root(dst) as dst_fd:
        try:  # marks the tree as ours before the manifest (which lists what we own) goes
            journal_fd = os.open(
                JOURNAL,
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                0o644,
                dir_fd=dst_fd,
            )
        except OSError as error:
            if error.errno == errno.ELOOP:
                _refuse(dst_fd, JOURNAL, dst / JOURNAL, "regular file")
            raise
        with os.fdopen(journal_fd, "a") as journal:
            _refuse_irregular(journal.fileno(), dst / JOURNAL)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(MANIFEST, dir_fd=dst_fd)  # incomplete until rewritten at the end
            done = _read_journal(_read_control(dst_fd, JOURNAL, dst / JOURNAL))
            entries, copied, skipped = _stage_files(src_fd, src, dst_fd, dst, files, done, journal, progress)
        _remove_unlisted(dst_fd, dst, owned - set(entries))
        manifest = write_manifest(dst, entries)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(JOURNAL, dir_fd=dst_fd)
    return StageResult(len(entries), sum(e["size"] for e in entries.values()), copied, skipped, manifest)


def _refuse_irregular(fd: int, path: Path) -> None:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise StagingError(f"{path}: is not a regular file")


def _stage_files(src_fd, src, dst_fd, dst, files, done, journal, progress) -> tuple[dict[str, dict], int, int]:
    """Copies each file unless its staged bytes already hash to the source's; journals each as it lands.

    A journal entry (left by an interrupted stage) spares hashing the source only when the source's
    size and mtime are unchanged AND the staged bytes still hash to the recorded sha256: a file
    corrupted after the interruption, same size or not, is copied again.
    """
    entries: dict[str, dict] = {}
    copied = skipped = 0
    for path in files:
        rel = str(path.relative_to(src))
        with _parent(src_fd, src, rel) as (sdir, sname):
            st = lstat_at(sdir, sname)
        if st is None:
            raise StagingError(f"{path}: source file vanished during staging; rerun to stage it again")
        prev = done.get(rel) or {}
        digest = _staged_digest(dst_fd, dst, rel, st.st_size)
        if digest is not None and (
            ((prev.get("size"), prev.get("mtime_ns")) == _stat_key(st) and digest == prev.get("sha256"))
            or digest == _source_digest(src_fd, src, rel)
        ):
            skipped += 1
        else:
            digest, st = _copy_one(src_fd, src, dst_fd, dst, rel)
            copied += 1
        entries[rel] = {"size": st.st_size, "sha256": digest}
        journal.write(
            json.dumps({"path": rel, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}) + "\n"
        )
        journal.flush()
        if progress:
            progress(rel)
    return entries, copied, skipped


def _source_digest(src_fd: int, src: Path, rel: str) -> str:
    with _parent(src_fd, src, rel) as (sdir, sname):
        return _sha256_fd(_open_regular(sdir, sname, src / rel))


def _remove_unlisted(dst_fd: int, dst: Path, stale: set[str]) -> None:
    """Removes what we staged before and the source no longer has: regular files only, reached
    without following a link (a link on the way is refused, naming it; a link at the name stays)."""
    for rel in sorted(stale):
        if not _inside(rel):
            continue  # a tampered journal or manifest never reaches outside the tree
        try:
            with _parent(dst_fd, dst, rel) as (ddir, name):
                st = lstat_at(ddir, name)
                if st is not None and stat.S_ISREG(st.st_mode):
                    os.unlink(name, dir_fd=ddir)
        except (FileNotFoundError, _NotAFolder):
            continue  # already gone


def _inside(rel: str) -> bool:
    try:
        _parts(rel)
    except StagingError:
        return False
    return True


def write_manifest(root: Path, entries: dict[str, dict]) -> Path:
    doc = {
        "version": MANIFEST_VERSION,
        "count": len(entries),
        "bytes": sum(e["size"] for e in entries.values()),
        "files": dict(sorted(entries.items())),
    }
    with open_root(root) as fd:  # a planted link at the temp name is removed, not written through
        write_atomic(fd, MANIFEST, json.dumps(doc, indent=1).encode(), fsync=True)
    return root / MANIFEST


def load_manifest(root: Path) -> dict:
    path = root / MANIFEST
    try:
        fd = os.open(path, READ_FLAGS)
    except FileNotFoundError:
        raise DatasetError(f"{path}: no manifest (the tree was never fully staged)") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise DatasetError(f"{path}: is a symbolic link (not followed)") from None
        raise DatasetError(f"{path}: cannot read ({error.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise DatasetError(f"{path}: no manifest (not a regular file)")
        text = f.read()
    try:
        doc = json.loads(text)
        if (
            not isinstance(doc, dict)
            or doc.get("version") != MANIFEST_VERSION
            or not isinstance(doc.get("files"), dict)
        ):
            raise ValueError("unknown version or no 'files'")
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as error:
        raise DatasetError(f"{path}: malformed manifest ({error})") from None
    return doc


def verify(root: Path) -> list[str]:
    """Problems found comparing `root` with its manifest: one line each, naming the file; no link is followed."""
    doc = load_manifest(root)
    problems = []
    listed = set(doc["files"])
    with open_root(root) as root_fd:
        for rel, entry in doc["files"].items():
            problem = _check_listed(root_fd, root, rel, entry)
            if problem:
                problems.append(problem)
    for path in _tree(root):
        rel = str(path.relative_to(root))
        if rel not in listed and rel not in _SKIP and not path.name.startswith("."):
            kind = " (a symbolic link)" if path.is_symlink() else ""
            problems.append(f"{path}: not in manifest{kind}")
    if doc.get("count") != len(listed):
        problems.append(f"{root / MANIFEST}: count {doc.get('count')} != {len(listed)} files listed")
    return problems


def _check_listed(root_fd: int, root: Path, rel: str, entry: dict) -> str | None:
    path = root / rel
    try:
        with _parent(root_fd, root, rel) as (d, name):
            st = lstat_at(d, name)
            if st is None:
                return f"{path}: missing"
            if stat.S_ISLNK(st.st_mode):
                return f"{path}: is a symbolic link (not followed)"
            if not stat.S_ISREG(st.st_mode):
                return f"{path}: not a regular file"
            if st.st_size != entry.get("size"):
                return f"{path}: size {st.st_size} != manifest {entry.get('size')}"
            if _sha256_fd(_open_regular(d, name, path)) != entry.get("sha256"):
                return f"{path}: sha256 differs from manifest"
    except FileNotFoundError:
        return f"{path}: missing"
    except (StagingError, AttributeError) as error:
        return str(error) if isinstance(error, StagingError) else f"{path}: malformed manifest entry"
    return None


def _tree(root: Path) -> list[Path]:
    """Every non-folder entry under root, links included as entries; no link is descended into."""
    out = []
    for folder, dirs, names in os.walk(root):  # followlinks=False: a linked folder is listed, not entered
        here = Path(folder)
        out += [here / n for n in names] + [here / d for d in dirs if (here / d).is_symlink()]
    return sorted(out)
