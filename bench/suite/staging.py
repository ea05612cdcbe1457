"""Staging a suite's datasets from this process: the worker (`stage_on: worker`), or the compute node
`python -m bench.suite.stage_node` runs on (`stage_on: node`). Both take a StagingSpec, the datasets'
settings alone: the node is never handed a suite config with a run it will not do (stage_node once built
a TrainConfig for an 'ssd' run with its output_dir set to the dataset folder, to pass SweepConfig's
required fields; two fixes came from it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, field_validator

from bench.config.models import SweepConfig, TrainConfig, limits_of, suite_default
from bench.config.types import Frozen, SafePath, WorkloadRef, default_of, unique_items
from bench.data.location import S3Url, is_s3
from bench.suite.plan import DATASET_KIND, dataset_dir, workload_names, workload_of


class StagingSpec(Frozen):
    """What staging needs: the workloads' refs (a built-in's name or a workload file), where their
    datasets go, how many images a generated one has, its seed, and a tree to stage from instead. The
    limits and defaults are the suite's (SuiteSettings, TrainConfig's seed), written there once."""

    workloads: tuple[WorkloadRef, ...] = Field(min_length=1)
    dataset_path: S3Url | SafePath  # a folder, or s3://BUCKET/PREFIX (bench.data.location decides)
    dataset_images: int = suite_default("dataset_images")
    seed: int = Field(default_of(TrainConfig, "seed"), **limits_of(TrainConfig, "seed"))
    stage_from: SafePath | None = suite_default("stage_from")

    @field_validator("workloads")
    @classmethod
    def _unique(cls, items: tuple) -> tuple:
        return unique_items(items)

    @classmethod
    def of(cls, cfg: SweepConfig) -> StagingSpec:
        """The suite's datasets' settings (its seed is its ranks')."""
        return cls(
            workloads=cfg.training.workloads,
            dataset_path=cfg.data.dataset_path,
            dataset_images=cfg.data.dataset_images,
            seed=cfg.train.seed,
            stage_from=cfg.data.stage_from,
        )


def stage_records(spec: StagingSpec, workload: str) -> dict:
    """A workload file's records: generated on the storage under test (kept where a previous run wrote
    the same ones), or the user's folder listed once (bench.data.records)."""
    from bench.data.records import RecordsSpec, generate_records, load_records

    data = workload_of(spec.workloads, workload).spec.dataset
    target = dataset_dir(spec.workloads, spec.dataset_path, workload)
    if data.path is not None:
        manifest = load_records(target, data.format)
    else:
        spec = RecordsSpec(
            data.format,
            data.files,
            data.samples_per_file,
            data.record_bytes.mean,
            data.record_bytes.stdev,
            spec.seed,
        )
        manifest = generate_records(spec, target)
    files = manifest["files"]
    return {
        "path": str(target),
        "files": len(files),
        "bytes": sum(f["bytes"] for f in files),
        "copied": 0,
        "skipped": 0,
    }


def stage_here(spec: StagingSpec, store_env: Mapping[str, str] | None = None) -> dict:
    """Each workload's dataset staged from this process (the worker, or the node `stage_node` runs on): a
    real model's generated tree, or a workload file's records. A bucket: bench.suite.staging_s3, with
    `store_env`'s endpoint and keys (None: this process's AWS variables)."""
    if is_s3(spec.dataset_path):
        from bench.suite.staging_s3 import stage_here_s3

        return stage_here_s3(spec, store_env)
    out = {}
    for workload in workload_names(spec.workloads):
        kind = DATASET_KIND.get(workload) or workload_of(spec.workloads, workload).spec.dataset.layout
        if kind == "records":
            out[workload] = stage_records(spec, workload)
        else:
            target = dataset_dir(spec.workloads, spec.dataset_path, workload)
            out[workload] = stage_one(kind, target, spec.stage_from, spec.dataset_images, spec.seed)
    return out


def stage_one(kind: str, target: Path, stage_from: Path | None, images: int, seed: int) -> dict:
    """One dataset, generated (or copied from `stage_from`), staged to `target` and manifest-checked."""
    from bench.data.checks import check_manifest
    from bench.data.generate import GenerateSpec, generate
    from bench.data.stage import stage
    from bench.errors import DatasetError

    if stage_from is not None:
        result = stage(stage_from / kind, target)
    else:
        source = target.parent / f".source-{kind}"
        # two copies on the storage under test: the generated source and the staged tree
        generate(GenerateSpec(kind, source, images=images, seed=seed), copies=2)
        result = stage(source, target)
    report = check_manifest(target, expect_images=None if stage_from else images)
    if not report["success"]:
        raise DatasetError(f"{target}: manifest checks failed: {report['failed']}")
    return {
        "path": str(target),
        "files": result.files,
        "bytes": result.bytes,
        "copied": result.copied,
        "skipped": result.skipped,
    }
