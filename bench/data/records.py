"""Record datasets for workload files: generated JPEG, PNG, NPZ or raw-record files of a given size, or
a user's own folder of them, with one manifest (`records.json`) naming every file, its bytes and its
records (offset, length). The emulated ranks read through it (bench.loaders.records).

Why a manifest of its own: an emulated workload's reads are its figure, so a rank must know each
record's bytes before it reads them (the loader's consumed bytes against cachestat's), and a user's
folder is listed once, at first read, not by every rank.

Generated files are a pure function of (seed, index), of exactly the drawn record size: random bytes
for raw and NPZ (incompressible, as real records are to the page cache and the storage), valid JPEG
and PNG files padded with random bytes where decoders skip them (`_image`); the manifest holds what
was written.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from bench.errors import DatasetError
from bench.safe_fs import open_root, write_atomic

RecordFormat = Literal["jpeg", "png", "npz", "raw"]
RECORD_FORMATS: tuple[str, ...] = ("jpeg", "png", "npz", "raw")
RECORDS_MANIFEST = "records.json"
SUFFIX = {"jpeg": ".jpg", "png": ".png", "npz": ".npz", "raw": ".bin"}
# Leading bytes of each format: a user's folder is detected by what its files hold, not their names.
MAGIC = {"jpeg": b"\xff\xd8\xff", "png": b"\x89PNG\r\n\x1a\n", "npz": b"PK\x03\x04"}
MANIFEST_VERSION = 1


@dataclass(frozen=True)
class RecordsSpec:
    """What to generate: `files` files of `samples_per_file` records each, record bytes drawn from a
    normal of `mean` and `stdev` (clipped at 64 bytes), deterministic in `seed`."""

    format: RecordFormat
    files: int
    samples_per_file: int
    mean: int
    stdev: int = 0
    seed: int = 0


def record_sizes(spec: RecordsSpec, index: int) -> list[int]:
    rng = np.random.default_rng([spec.seed, index, 7])
    draws = (
        rng.normal(spec.mean, spec.stdev, spec.samples_per_file) if spec.stdev else [spec.mean] * spec.samples_per_file
    )
    return [max(64, round(float(v))) for v in draws]


def _image(fmt: str, size: int, rng: np.random.Generator) -> bytes:
    """A valid image file of exactly `size` bytes (or the smallest noise image, when `size` is below
    it): a small noise image, padded with random bytes inside segments decoders skip (JPEG COM
    segments, a private ancillary PNG chunk). Encoding a full-size noise image costs ~5 ms a file (30 s
    for a 1.3 GB set on two cores); padding costs a random draw. Decoding such a file decodes the small
    image only: a workload that must pay full decode costs reads its own images (dataset.path)."""
    from PIL import Image

    side = 64 if size >= 16_384 else 16
    buf = io.BytesIO()
    pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buf, format="PNG" if fmt == "png" else "JPEG", quality=90, compress_level=1)
    data = buf.getvalue()
    if fmt == "png":
        need = size - len(data) - 12  # a chunk's length, type and CRC
        if need <= 0:
            return data
        payload = rng.integers(0, 256, need, dtype=np.uint8).tobytes()
        chunk = struct.pack(">I", need) + b"prVt" + payload + struct.pack(">I", zlib.crc32(b"prVt" + payload))
        return data[:-12] + chunk + data[-12:]  # before IEND
    segments, need = [], size - len(data)
    while need >= 4:
        n = min(need - 4, 65533)
        if 0 < need - 4 - n < 4:  # leave no remainder too small for a segment of its own
            n -= 4
        segments.append(b"\xff\xfe" + struct.pack(">H", n + 2) + rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        need -= n + 4
    return data[:2] + b"".join(segments) + data[2:] + bytes(max(need, 0))  # a last 1-3 bytes trail the EOI


def _render(spec: RecordsSpec, index: int) -> tuple[bytes, list[list[int]]]:
    """One file's bytes and its records' [offset, length] (a whole image or NPZ is one record's read)."""
    rng = np.random.default_rng([spec.seed, index])
    sizes = record_sizes(spec, index)
    if spec.format == "raw":
        data = rng.integers(0, 256, sum(sizes), dtype=np.uint8).tobytes()
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
        return data, [[int(o), int(n)] for o, n in zip(offsets, sizes, strict=True)]
    if spec.format == "npz":
        buf = io.BytesIO()
        width = max(sizes)
        np.savez(buf, x=rng.integers(0, 256, (len(sizes), width), dtype=np.uint8))
        data = buf.getvalue()
        return data, [[0, len(data)]]
    data = _image(spec.format, sizes[0], rng)
    return data, [[0, len(data)]]


def file_name(spec: RecordsSpec, index: int) -> str:
    return f"{index:08d}{SUFFIX[spec.format]}"


def generate_records(spec: RecordsSpec, out: Path) -> dict:
    """Write the files (each write-then-rename, kept when already of the manifest's size) and the
    manifest; returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    need = spec.files * spec.samples_per_file * (spec.mean + 3 * spec.stdev)
    free = shutil.disk_usage(out).free
    if free < need:
        raise DatasetError(
            f"{out}: {spec.files} files of ~{spec.samples_per_file * spec.mean} bytes need up to {need} bytes, "
            f"{free} are free (dataset.files, dataset.record_bytes)"
        )
    old = _read_manifest(out)
    known = {f["name"]: f for f in old["files"]} if old and old.get("spec") == _spec_dict(spec) else {}
    files = []
    for index in range(spec.files):
        name = file_name(spec, index)
        path = out / name
        entry = known.get(name)
        if entry is not None and path.is_file() and not path.is_symlink() and path.stat().st_size == entry["bytes"]:
            files.append(entry)
            continue
        data, records = _render(spec, index)
        # write-then-rename through the folder's descriptor (bench.safe_fs): a link planted at the temp
        # name or the file's name is replaced, never written through (issue 48)
        with open_root(out) as dir_fd:
            write_atomic(dir_fd, name, data)
        files.append({"name": name, "bytes": len(data), "records": records})
    manifest = {"version": MANIFEST_VERSION, "format": spec.format, "spec": _spec_dict(spec), "files": files}
    _write_manifest(out, manifest)
    return manifest


def _spec_dict(spec: RecordsSpec) -> dict:
    return {k: getattr(spec, k) for k in ("format", "files", "samples_per_file", "mean", "stdev", "seed")}


def detect_format(path: Path) -> str:
    """A file's format from its first bytes; raw when it is none of the known ones."""
    with open(path, "rb") as f:
        head = f.read(8)
    return next((fmt for fmt, magic in MAGIC.items() if head.startswith(magic)), "raw")


def scan_folder(root: Path, fmt: str | None, record_bytes: int | None = None) -> dict:
    """A manifest for a user's folder (its regular files, sorted, links and dot-files skipped): `fmt`
    declared or detected from the first file (every file must then match it); raw files are split into
    records of `record_bytes` (whole files when None)."""
    if not root.is_dir():
        raise DatasetError(f"dataset.path {root}: not a directory")
    names = sorted(p.name for p in root.iterdir() if p.is_file() and not p.is_symlink() and not p.name.startswith("."))
    names = [n for n in names if n != RECORDS_MANIFEST]
    if not names:
        raise DatasetError(f"dataset.path {root}: holds no files")
    fmt = fmt or detect_format(root / names[0])
    files = []
    for name in names:
        size = (root / name).stat().st_size
        found = detect_format(root / name)
        if fmt != "raw" and found != fmt:
            raise DatasetError(f"dataset.path {root / name}: is {found}, not {fmt} like the rest (dataset.format)")
        step = record_bytes if fmt == "raw" and record_bytes else size
        records = [[o, min(step, size - o)] for o in range(0, size, max(step, 1))] or [[0, 0]]
        files.append({"name": name, "bytes": size, "records": records})
    return {"version": MANIFEST_VERSION, "format": fmt, "spec": None, "files": files}


def load_records(root: Path, fmt: str | None = None) -> dict:
    """The folder's manifest; a folder without one is scanned now and the manifest written beside its
    files (kept in memory only where the folder is read-only)."""
    manifest = _read_manifest(root)
    if manifest is None:
        manifest = scan_folder(root, fmt)
        with contextlib.suppress(OSError):  # a read-only folder: the manifest stays in memory
            _write_manifest(root, manifest)
    if fmt is not None and manifest["format"] != fmt:
        raise DatasetError(f"{root / RECORDS_MANIFEST}: format {manifest['format']}, the workload declares {fmt}")
    for entry in manifest["files"]:
        name = entry["name"]
        if not isinstance(name, str) or not name or "/" in name or "\0" in name or name in (".", ".."):
            # a records folder is flat (scan_folder lists its own files): a name that climbs out of it
            # would have the loaders and the probe read whatever it points at
            raise DatasetError(f"{root / RECORDS_MANIFEST}: file name {name!r} is not a file of this folder")
        path = root / name
        if not path.is_file() or path.stat().st_size != entry["bytes"]:
            raise DatasetError(
                f"{path}: listed in {RECORDS_MANIFEST} with {entry['bytes']} bytes but missing or resized"
            )
    return manifest


def _read_manifest(root: Path) -> dict | None:
    path = root / RECORDS_MANIFEST
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DatasetError(f"{path}: not a readable manifest ({error})") from None
    if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION or doc.get("format") not in RECORD_FORMATS:
        raise DatasetError(f"{path}: not a version-{MANIFEST_VERSION} records manifest")
    return doc


def _write_manifest(root: Path, manifest: dict) -> None:
    """records.json, written through the folder's descriptor: never through a link planted at its temp name."""
    with open_root(root) as dir_fd:
        write_atomic(dir_fd, RECORDS_MANIFEST, json.dumps(manifest).encode())
