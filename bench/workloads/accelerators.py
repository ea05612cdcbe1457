"""Accelerator profiles: one model's measured seconds per batch on one accelerator, with where the figure
comes from and when. An emulated workload waits this long per batch instead of computing (emulate.py).

Each figure's source is named beside it; `basis` says how it was obtained:
- measured: timed by this project on that accelerator (benchmarks/RESULTS.md, section GPU);
- published: MLPerf Storage's workload config (mlcommons/storage, configs/dlio/workload/), the
  `train.computation_time` DLIO sleeps per batch and the `metric.au` a run must hold.
A profile file written by scripts/gpu-check.sh (docs/schemas.md, "Accelerator profile") loads too
(`profiles_from_file`), named `<workload>-<precision>@<file stem>`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from bench.config.defaults import MLPERF_STORAGE_MIN_AU
from bench.config.models import Thresholds, limits_of
from bench.config.types import Frozen
from bench.errors import ConfigError

MLPERF_REPO = "github.com/mlcommons/storage"


class Profile(Frozen):
    name: str
    accelerator: str
    model: str
    batch_size: int = Field(ge=1)
    seconds_per_batch: float = Field(gt=0)
    # a measured profile: MLPerf Storage's floor; a published one: its config's metric.au
    min_au: float = Field(MLPERF_STORAGE_MIN_AU, **limits_of(Thresholds, "min_au"))
    basis: Literal["measured", "published", "derived"]
    source: str
    date: str  # when the figure was measured or published (UTC date)
    gradient_bytes: int = Field(0, ge=0)  # the model's gradient per step, for the optional allreduce

    @property
    def images_per_s(self) -> float:
        return self.batch_size / self.seconds_per_batch


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            name="ssd300-r50-h200",
            accelerator="NVIDIA H200",
            model="SSD300-R50 (production preset, 300 px, bf16, channels_last, DDP 1 rank)",
            batch_size=64,
            seconds_per_batch=round(64 / 1299, 5),  # bench train --synthetic: 1299 images/s
            basis="measured",
            source="benchmarks/RESULTS.md, section GPU: `bench train --synthetic --precision bf16 --backend ddp`, "
            "1299 img/s",
            date="2026-12-04",
            gradient_bytes=0,
        ),
        Profile(
            name="deeplabv3plus-r101-h200",
            accelerator="NVIDIA H200",
            model="DeepLabv3+ R101 (production preset, 512 px, bf16, channels_last)",
            batch_size=16,
            seconds_per_batch=round(16 / 290, 5),  # the plain tuned loop: 290 images/s
            basis="measured",
            source="benchmarks/RESULTS.md, section GPU: the plain tuned torch loop (benchmarks/tuned_reference.py), "
            "290 img/s at batch 16 (docs/benchmarks.md section 13); not measured through bench train",
            date="2026-12-04",
        ),
        Profile(
            name="retinanet-b200",
            accelerator="NVIDIA B200",
            model="RetinaNet (MLPerf Storage)",
            batch_size=24,
            seconds_per_batch=0.04755,
            min_au=0.85,
            basis="published",
            source=f"{MLPERF_REPO} configs/dlio/workload/retinanet_b200.yaml @11460d0 (computation_time, metric.au)",
            date="2026-12-05",
        ),
        Profile(
            name="unet3d-h100",
            accelerator="NVIDIA H100",
            model="3D U-Net (MLPerf Storage)",
            batch_size=7,
            seconds_per_batch=0.323,
            min_au=0.90,
            basis="published",
            source=f"{MLPERF_REPO} configs/dlio/workload/unet3d_h100.yaml @7e73663 (computation_time, metric.au)",
            date="2026-12-05",
            gradient_bytes=499153191,  # the config's model_size
        ),
        Profile(
            name="unet3d-b200",
            accelerator="NVIDIA B200",
            model="3D U-Net (MLPerf Storage)",
            batch_size=7,
            seconds_per_batch=0.162,
            min_au=0.90,
            basis="derived",
            source=f"{MLPERF_REPO} configs/dlio/workload/unet3d_b200.yaml @0d75b41: the H100 figure halved, as "
            "that file says (B200 ~2x H100), not a separate measurement",
            date="2026-12-05",
            gradient_bytes=499153191,
        ),
    )
}


def profile(name: str) -> Profile:
    """A shipped profile by name; ConfigError naming the field and the known ones."""
    if name not in PROFILES:
        raise ConfigError(
            f"compute.accelerator.profile: unknown profile {name!r}; known: {', '.join(sorted(PROFILES))}"
        )
    return PROFILES[name]


def profiles_from_file(path: Path) -> dict[str, Profile]:
    """The profiles of an accelerators.yaml that scripts/gpu-check.sh wrote; a dry run or an unknown
    version is refused (its figures are CPU ones)."""
    from bench.suite_files import parse_yaml, read_suite_text

    doc = parse_yaml(path, read_suite_text(path)) or {}
    if not isinstance(doc, dict) or doc.get("version") != 1:
        raise ConfigError(f"{path}: not a version-1 accelerator profile (docs/schemas.md)")
    if doc.get("dry_run"):
        raise ConfigError(f"{path}: dry_run is true: CPU figures, never a profile")
    out = {}
    for workload, by_precision in (doc.get("workloads") or {}).items():
        for precision, figures in (by_precision or {}).items():
            name = f"{workload}-{precision}@{path.stem}"
            out[name] = Profile(
                name=name,
                accelerator=str(doc.get("accelerator")),
                model=f"{workload} ({figures.get('preset')}, {figures.get('image_size')} px, {precision})",
                batch_size=figures["batch_size"],
                seconds_per_batch=figures["seconds_per_batch"],
                basis="measured",
                source=str(doc.get("source") or path),
                date=str(doc.get("measured_at")),
            )
    return out
