"""Staging a suite's datasets into a bucket (`dataset_path: s3://BUCKET/PREFIX`): the store is checked
before anything is written (bench.data.stage_s3.check_store), the prefix claimed, then each workload's
dataset is generated (or taken from `stage_from` / the user's records folder) into a scratch folder on
this machine (an image dataset's index and headers checked there, check_images) and uploaded under
`PREFIX/<the folder name the file path uses>`, verified, manifest last.

Why generate locally and upload: generation is a pure function of (seed, index), so a re-staging
regenerates the same bytes, lists the bucket and uploads nothing that is already there and correct.
The endpoint and keys are this process's standard AWS variables (bench.data.location), never the suite's.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from bench.data.location import S3Location, credentials_from_env, parse_location, s3_client
from bench.suite.plan import DATASET_KIND, s3_dataset_name, workload_names, workload_of

log = logging.getLogger(__name__)


class StagingSpec(Protocol):
    """What S3 staging reads of bench.suite.staging.StagingSpec (typed here: staging imports this
    module, so this module may not import it back)."""

    workloads: tuple[str, ...]
    dataset_path: str | Path
    dataset_images: int
    seed: int
    stage_from: Path | None


def local_source(spec: StagingSpec, workload: str, scratch: Path) -> Path:
    """The folder of the workload's dataset on this machine: generated into `scratch`, or given."""
    from bench.data.generate import GenerateSpec, generate
    from bench.data.records import RecordsSpec, generate_records, load_records

    kind = DATASET_KIND.get(workload) or workload_of(spec.workloads, workload).spec.dataset.layout
    if kind != "records":
        source = Path(spec.stage_from) / kind if spec.stage_from is not None else scratch / kind
        if spec.stage_from is None:
            generate(GenerateSpec(kind, source, images=spec.dataset_images, seed=spec.seed))
        check_images(kind, source)
        return source
    data = workload_of(spec.workloads, workload).spec.dataset
    if data.path is not None:
        load_records(data.path, data.format)  # lists it once and writes its records.json
        return data.path
    out = scratch / f"records-{workload}"
    rs = RecordsSpec(
        data.format, data.files, data.samples_per_file, data.record_bytes.mean, data.record_bytes.stdev, spec.seed
    )
    generate_records(rs, out)
    return out


def check_images(kind: str, source: Path) -> None:
    """An image dataset is checked on this machine before it is uploaded, as the ranks check a folder's
    (its index parsed, every listed file there, each image's header read): a rank over S3 reads each
    file whole by one GET and checks nothing up front, and a DatasetError here names the local file."""
    from bench.data.dataset import check_jpegs, load_coco, load_segmentation

    if kind == "coco":
        coco = load_coco(source)
        check_jpegs(source / "images", coco.files)
    elif kind == "segmentation":
        seg = load_segmentation(source)
        check_jpegs(source, seg.images)


def stage_here_s3(spec: StagingSpec, env: Mapping[str, str] | None = None) -> dict:
    """Each workload's dataset staged under the suite's prefix; {workload: {path, files, bytes, copied,
    skipped}} as the file staging returns. Refused (StoreRefused) before any write when the store is
    unusable."""
    from bench.data.stage_s3 import check_store, claim_prefix, stage_to_s3
    from bench.storage.checkpoint_s3 import sweep_stale

    location = parse_location(str(spec.dataset_path), env)
    assert isinstance(location, S3Location)
    client = s3_client(credentials_from_env(env))
    check_store(client, location)
    claim_prefix(client, location)
    swept = sweep_stale(client, location)  # what killed ranks' checkpoints left (never a live run's)
    if any(swept.values()):
        what = "%s: deleted %d checkpoint object(s) and aborted %d upload(s) killed ranks left"
        log.info(what, location.url, swept["objects"], swept["uploads"])
    out = {}
    with tempfile.TemporaryDirectory(prefix="scalewatch-s3-stage-") as scratch:
        for workload in workload_names(spec.workloads):
            source = local_source(spec, workload, Path(scratch))
            target = location.child(s3_dataset_name(spec.workloads, workload))
            result = stage_to_s3(client, source, target)
            out[workload] = {
                "path": target.url,
                "files": result.files,
                "bytes": result.bytes,
                "copied": result.copied,
                "skipped": result.skipped,
            }
    return out
