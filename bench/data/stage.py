"""Copy a dataset onto the storage under test, verified, resumable, with a manifest.

Each file goes to a hidden partial name, is hashed while copied, checked against the source's stat
taken before and after, fsynced and renamed: a file is either fully staged or absent. A journal of
finished files makes a rerun skip them; the manifest is written last, so a tree with a manifest is
a complete, verified copy.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.errors import DatasetError, StagingError

MANIFEST = "MANIFEST.json"
JOURNAL = ".scalewatch-stage.jsonl"
MANIFEST_VERSION = 1
CHUNK = 4 << 20
_SKIP = {MANIFEST, JOURNAL}


@dataclass(frozen=True)
class StageResult:
    files: int
    bytes: int
    copied: int
    skipped: int
    manifest: Path


def source_files(src: Path) -> list[Path]:
    if not src.is_dir():
        raise StagingError(f"--from {src}: not a readable directory")
    files = []
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if rel.name in _SKIP or any(part.startswith(".") for part in rel.parts):
            continue
        if path.is_file():
            if not os.access(path, os.R_OK):
                raise StagingError(f"{path}: source file is not readable")
            files.append(path)
    if not files:
        raise StagingError(f"--from {src}: no files to stage")
    return files


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _stat_key(st: os.stat_result) -> tuple[int, int]:
    return st.st_size, st.st_mtime_ns


def _copy_one(src: Path, dst: Path) -> str:
    """Copy with hashing; raises StagingError naming the file, leaving no partial behind."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    partial = dst.with_name(f".{dst.name}.partial")
    try:
        before = _stat_key(src.stat())
        h = hashlib.sha256()
        with src.open("rb") as fin, partial.open("wb") as fout:
            while chunk := fin.read(CHUNK):
                h.update(chunk)
                fout.write(chunk)
            fout.flush()
            os.fsync(fout.fileno())
        if _stat_key(src.stat()) != before:
            raise StagingError(f"{src}: source file changed during staging; rerun to stage it again")
        os.replace(partial, dst)
        return h.hexdigest()
    except PermissionError as error:
        raise StagingError(f"{src}: cannot read ({error.strerror})") from None
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StagingError(f"{dst}: destination is full ({error.strerror}); nothing recorded as staged") from None
        raise StagingError(f"{dst}: copy failed ({error.strerror})") from None
    finally:
        partial.unlink(missing_ok=True)


def _read_journal(path: Path) -> dict[str, dict]:
    done: dict[str, dict] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
                done[entry["path"]] = entry
            except (json.JSONDecodeError, KeyError):
                continue  # a torn last line from an interrupted run
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
    has_manifest, has_journal = (dst / MANIFEST).is_file(), (dst / JOURNAL).is_file()
    if not has_manifest and not has_journal:
        if any(dst.iterdir()):
            raise StagingError(
                f"--to {dst}: not empty and holds no scalewatch {MANIFEST} or {JOURNAL}; refusing to stage "
                "into a folder scalewatch did not create (pick an empty or new folder)"
            )
        return set()
    owned = set(_read_journal(dst / JOURNAL))
    if has_manifest:  # a torn manifest: only the journal's files count as ours
        with contextlib.suppress(OSError, json.JSONDecodeError, AttributeError):
            owned |= set(json.loads((dst / MANIFEST).read_text()).get("files", {}))
    return owned


def stage(src: Path, dst: Path, progress: Callable[[str], None] | None = None) -> StageResult:
    files = source_files(src)
    owned = owned_files(dst)
    dst.mkdir(parents=True, exist_ok=True)
    journal_path = dst / JOURNAL
    journal_path.touch()  # marks the tree as ours before the manifest (which lists what we own) goes
    (dst / MANIFEST).unlink(missing_ok=True)  # incomplete until rewritten at the end
    done = _read_journal(journal_path)
    entries: dict[str, dict] = {}
    copied = skipped = 0
    with journal_path.open("a") as journal:
        for path in files:
            rel = str(path.relative_to(src))
            st = path.stat()
            target = dst / rel
            prev = done.get(rel)
            if (
                prev
                and (prev["size"], prev["mtime_ns"]) == _stat_key(st)
                and target.is_file()
                and target.stat().st_size == st.st_size
            ):
                entries[rel] = {"size": prev["size"], "sha256": prev["sha256"]}
                skipped += 1
                continue
            digest = sha256_file(target) if target.is_file() and target.stat().st_size == st.st_size else None
            if digest is not None and digest == sha256_file(path):
                skipped += 1
            else:
                digest = _copy_one(path, target)
                copied += 1
            entries[rel] = {"size": st.st_size, "sha256": digest}
            journal.write(
                json.dumps({"path": rel, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}) + "\n"
            )
            journal.flush()
            if progress:
                progress(rel)
    for rel in sorted(owned - set(entries)):  # what we staged before and the source no longer has
        path = dst / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            continue  # a tampered manifest never reaches outside the tree
        if path.is_file() and not path.is_symlink():
            path.unlink()
    manifest = write_manifest(dst, entries)
    journal_path.unlink(missing_ok=True)
    return StageResult(len(entries), sum(e["size"] for e in entries.values()), copied, skipped, manifest)


def write_manifest(root: Path, entries: dict[str, dict]) -> Path:
    doc = {
        "version": MANIFEST_VERSION,
        "count": len(entries),
        "bytes": sum(e["size"] for e in entries.values()),
        "files": dict(sorted(entries.items())),
    }
    path = root / MANIFEST
    tmp = root / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, path)
    return path


def load_manifest(root: Path) -> dict:
    path = root / MANIFEST
    if not path.is_file():
        raise DatasetError(f"{path}: no manifest (the tree was never fully staged)")
    try:
        doc = json.loads(path.read_text())
        if doc.get("version") != MANIFEST_VERSION or not isinstance(doc.get("files"), dict):
            raise ValueError("unknown version or no 'files'")
    except (json.JSONDecodeError, ValueError) as error:
        raise DatasetError(f"{path}: malformed manifest ({error})") from None
    return doc


def verify(root: Path) -> list[str]:
    """Problems found comparing `root` with its manifest: one line each, naming the file."""
    doc = load_manifest(root)
    problems = []
    listed = set(doc["files"])
    for rel, entry in doc["files"].items():
        path = root / rel
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.stat().st_size != entry["size"]:
            problems.append(f"{path}: size {path.stat().st_size} != manifest {entry['size']}")
        elif sha256_file(path) != entry["sha256"]:
            problems.append(f"{path}: sha256 differs from manifest")
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_file() and rel not in listed and rel not in _SKIP and not path.name.startswith("."):
            problems.append(f"{path}: not in manifest")
    if doc.get("count") != len(listed):
        problems.append(f"{root / MANIFEST}: count {doc.get('count')} != {len(listed)} files listed")
    return problems
