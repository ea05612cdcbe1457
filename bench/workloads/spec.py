"""Workload files: what a suite trains or emulates, as YAML validated like suite files (unknown keys
refused, every error naming its field).

A workload holds
- `dataset`: the project's generated COCO or segmentation tree (`layout`, the real models' data), or
  records: `format` (jpeg, png, npz, raw), `files`, `samples_per_file` and `record_bytes` {mean,
  stdev}, generated; or `path` to a folder of the user's own files, `format` declared or detected, its
  manifest made on first read (bench.data.records). Tar shards (WebDataset) and TFRecord are not
  offered: no library kept in this project's environment reads them (webdataset and tensorflow are
  not installed, and DALI's readers are absent on CPU nodes), and a reader of our own would measure
  our reader, not theirs.
- `reader`: loader, threads, batch, shuffle, prefetch, decode (null: the suite's setting).
- `compute`: `model: ssd | deeplabv3plus` (trained for real) or `accelerator:` one of `profile`,
  `seconds_per_batch`, `images_per_s` (emulated: bench.workloads.emulate), with an optional
  `allreduce_bytes` of gradient per step.
- `min_au`: the accelerator utilisation the storage must hold (null: the profile's, else not judged).

Built-ins live in builtin/*.yaml; a suite's `workloads:` names built-ins or absolute paths of files.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from bench.config.defaults import MLPERF_STORAGE_MIN_AU
from bench.config.models import Thresholds, limits_of
from bench.config.types import (
    BUILTIN_WORKLOADS_DIR,
    WORKLOADS,
    Frozen,
    LoaderKind,
    RecordFormat,
    SafePath,
    Workload,
    matching,
    parse,
)
from bench.errors import ConfigError

Layout = Literal["records", "coco", "segmentation"]
REAL_LAYOUT = {"ssd": "coco", "deeplabv3plus": "segmentation"}
MAX_RECORD_BYTES = 4 << 30


class RecordBytes(Frozen):
    mean: int = Field(ge=64, le=MAX_RECORD_BYTES)
    stdev: int = Field(0, ge=0, le=MAX_RECORD_BYTES)


class DatasetSpec(Frozen):
    layout: Layout = "records"
    format: RecordFormat | None = None
    files: int | None = Field(None, ge=1, le=10_000_000)
    samples_per_file: int = Field(1, ge=1, le=1_000_000)
    record_bytes: RecordBytes | None = None
    path: SafePath | None = None

    @model_validator(mode="after")
    def _shape(self) -> DatasetSpec:
        if self.layout != "records":
            if self.path is not None or self.record_bytes is not None or self.format not in (None, "jpeg"):
                raise ValueError(
                    f"layout {self.layout}: the project's generated tree; give no path, format or record_bytes"
                )
            return self
        if self.path is not None:
            if self.files is not None or self.record_bytes is not None:
                raise ValueError("path: an existing dataset is read as it is; give no files or record_bytes with it")
            return self
        if self.format is None or self.files is None or self.record_bytes is None:
            raise ValueError("format, files and record_bytes: a generated dataset needs all three (or give path)")
        if self.format != "raw" and self.samples_per_file != 1:
            raise ValueError(
                f"samples_per_file: a {self.format} file is read whole, as one record; allowed: 1 "
                "(raw files hold several records each)"
            )
        return self


class ReaderSpec(Frozen):
    loader: LoaderKind | None = None
    threads: int | None = Field(None, ge=0, le=128)
    batch: int | None = Field(None, ge=1, le=4096)
    shuffle: bool = True
    prefetch: int = Field(2, ge=1, le=64)
    decode: bool = False


class AcceleratorSpec(Frozen):
    profile: Annotated[str, matching(re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$"), "profile")] | None = None
    # an accelerators.yaml that scripts/gpu-check.sh wrote: `profile` then names one of its entries
    # (`<workload>-<precision>@<file stem>`, as `bench workloads check` lists them)
    profile_file: SafePath | None = None
    seconds_per_batch: float | None = Field(None, gt=0, le=3600)
    images_per_s: float | None = Field(None, gt=0, le=1e9)
    allreduce_bytes: int | None = Field(None, ge=0, le=1 << 40)

    @model_validator(mode="after")
    def _one(self) -> AcceleratorSpec:
        given = [k for k in ("profile", "seconds_per_batch", "images_per_s") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of profile, seconds_per_batch, images_per_s (got {given or 'none'})")
        if self.profile_file is not None and self.profile is None:
            raise ValueError("profile_file: name the profile of it to use (profile)")
        if self.profile is not None:
            known = self.profiles()
            if self.profile not in known:
                where = f"in {self.profile_file}" if self.profile_file else "shipped"
                raise ValueError(f"profile {self.profile!r} is not {where}; known: {', '.join(sorted(known))}")
        return self

    def profiles(self) -> dict:
        """The profiles `profile` is looked up in: the file's, else the shipped ones."""
        from bench.workloads.accelerators import PROFILES, profiles_from_file

        return profiles_from_file(self.profile_file) if self.profile_file else PROFILES


class ComputeSpec(Frozen):
    model: Workload | None = None
    accelerator: AcceleratorSpec | None = None

    @model_validator(mode="after")
    def _one(self) -> ComputeSpec:
        if (self.model is None) == (self.accelerator is None):
            raise ValueError(f"give exactly one of model ({' | '.join(WORKLOADS)}) or accelerator")
        return self


class WorkloadSpec(Frozen):
    description: str = ""
    dataset: DatasetSpec
    reader: ReaderSpec = ReaderSpec()
    compute: ComputeSpec
    min_au: float | None = Field(None, **limits_of(Thresholds, "min_au"))

    @model_validator(mode="after")
    def _fits(self) -> WorkloadSpec:
        model = self.compute.model
        if model is not None and self.dataset.layout != REAL_LAYOUT[model]:
            raise ValueError(
                f"dataset.layout: {model} trains on its {REAL_LAYOUT[model]} tree; allowed: {REAL_LAYOUT[model]}"
            )
        if model is None and self.dataset.layout != "records":
            raise ValueError("dataset.layout: an emulated workload reads records; allowed: records")
        if model is None and self.reader.loader == "dali":
            raise ValueError("reader.loader: an emulated workload reads with the records reader; allowed: torch")
        return self

    @property
    def emulated(self) -> bool:
        return self.compute.accelerator is not None


class Resolved(Frozen):
    """A workload with its accelerator figures worked out: what a rank is given."""

    name: str
    spec: WorkloadSpec
    accelerator: str = ""  # profile name; '' when real, 'custom' for a file's own figure
    seconds_per_batch: float | None = None
    batch_size: int | None = None
    gradient_bytes: int = 0
    min_au: float | None = None


def resolve(name: str, spec: WorkloadSpec) -> Resolved:
    acc = spec.compute.accelerator
    if acc is None:
        return Resolved(name=name, spec=spec, batch_size=spec.reader.batch, min_au=spec.min_au)
    prof = acc.profiles()[acc.profile] if acc.profile else None
    batch = spec.reader.batch or (prof.batch_size if prof else None)
    if batch is None:
        raise ConfigError(f"workload {name}: reader.batch: required with seconds_per_batch or images_per_s")
    if prof is not None:
        seconds = prof.seconds_per_batch * batch / prof.batch_size
    else:
        seconds = acc.seconds_per_batch if acc.seconds_per_batch is not None else batch / acc.images_per_s
    grad = acc.allreduce_bytes if acc.allreduce_bytes is not None else 0
    return Resolved(
        name=name,
        spec=spec,
        accelerator=acc.profile or "custom",
        seconds_per_batch=seconds,
        batch_size=batch,
        gradient_bytes=grad,
        min_au=spec.min_au if spec.min_au is not None else (prof.min_au if prof else None),
    )


def load_file(path: Path) -> WorkloadSpec:
    """A workload file read as suite files are (regular file, bounded YAML), validated; ConfigError
    naming the file and the field."""
    from bench.suite_files import parse_yaml, read_suite_text

    doc = parse_yaml(path, read_suite_text(path))
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: must be a mapping (dataset, reader, compute, min_au), got {type(doc).__name__}")
    return parse(WorkloadSpec, doc, prefix=f"{path}: ")


def workload_name(ref: str) -> str:
    """A suite's workload entry as rows and folders name it: a built-in's name, a file's stem."""
    return Path(ref).stem if ref.startswith("/") else ref


def emulated_workloads(refs, default_min_au: float | None) -> dict[str, dict]:
    """The suite's emulated workloads as accelerators-at-AU needs them: {name: accelerator, min_au,
    batch, seconds_per_batch, record_bytes} (min_au: the workload's, else the suite's, else MLPerf
    Storage's 0.9)."""
    out = {}
    for ref in refs:
        w = load(ref)
        if w.seconds_per_batch is None:
            continue
        record = w.spec.dataset.record_bytes
        out[workload_name(ref)] = {
            "accelerator": w.accelerator,
            "min_au": next(au for au in (w.min_au, default_min_au, MLPERF_STORAGE_MIN_AU) if au is not None),
            "batch": w.batch_size,
            "seconds_per_batch": w.seconds_per_batch,
            "record_bytes": float(record.mean) if record is not None else math.nan,
        }
    return out


def check_refs(refs) -> None:
    """Every workload a suite names, loaded and validated (ConfigError naming the file and field), and
    no two with one name (a file's stem names its rows and dataset folder)."""
    names = [workload_name(ref) for ref in refs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"workloads: {', '.join(twice)} named twice (a file's stem is its name; rename one)")
    for ref in refs:
        load(ref)


def builtin_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in BUILTIN_WORKLOADS_DIR.glob("*.yaml")))


def load(ref: str) -> Resolved:
    """A suite's `workloads:` entry: a built-in's name or an absolute path to a workload file."""
    if ref.startswith("/"):
        path = Path(ref)
        return resolve(path.stem, load_file(path))
    if ref not in builtin_names():
        raise ConfigError(f"workloads: {ref!r} is neither a built-in ({', '.join(builtin_names())}) nor a file path")
    return resolve(ref, load_file(BUILTIN_WORKLOADS_DIR / f"{ref}.yaml"))
