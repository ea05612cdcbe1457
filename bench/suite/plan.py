"""What a suite run will do and where it keeps it: the matrix, one scale's launch, the run folder."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from bench.config.models import RunSpec, SweepConfig, TrainConfig
from bench.data.location import is_s3
from bench.errors import ConfigError
from bench.results.schema import INDEPENDENT, REMEASURE, REMEASURE_INDEPENDENT, REPEAT, SYNTHETIC, WARM
from bench.workloads.spec import REAL_LAYOUT as DATASET_KIND  # a real model's dataset tree under dataset_path
from bench.workloads.spec import workload_name

# The dataset helpers take a suite's workload refs (a built-in's name or a workload file) and its dataset
# folder as values: a SweepConfig's (training.workloads, data.dataset_path) or staging's own StagingSpec's.


def workload_names(refs: Iterable[str]) -> list[str]:
    return [workload_name(ref) for ref in refs]


def workload_of(refs: Iterable[str], name: str):
    """The named workload of this suite, resolved (bench.workloads.spec): its dataset, reader and
    compute; ConfigError naming the file and field where it is invalid."""
    from bench.workloads.spec import load

    by_name = {workload_name(ref): ref for ref in refs}
    return load(by_name.get(name, name))


def run_matrix(cfg: SweepConfig) -> list[dict]:
    """Each scale, each above one rank followed at once by its node ceiling (so drift hits both alike).
    An emulated workload's scales include its AU search's counts (scales_of). An image model reading a
    bucket has no node ceiling (images_over_s3); its suite is checked first (check_bucket_readers)."""
    check_bucket_readers(cfg)
    out = []
    for w in workload_names(cfg.training.workloads):
        ceiling = cfg.probe.ceilings and not images_over_s3(cfg, w)
        for g in scales_of(cfg, w):
            out.append({"workload": w, "gpus": g})
            if ceiling and g > 1:
                out.append({"workload": w, "gpus": g, "variant": INDEPENDENT})
    return out


def images_over_s3(cfg: SweepConfig, workload: str) -> bool:
    """The workload is an image model (a built-in or a workload file's `compute.model`, no emulated
    accelerator) whose dataset is in a bucket. Its JPEG decode runs beside the GETs on the rank's
    cores, and no page cache holds an object: no rerun can take the store out and keep the decode (the
    warm-cache rerun and the node ceiling would run synthetic, without either), so it has neither a
    node ceiling nor the differential reruns that confirm a cause (bench.suite.run.confirmation_runs)."""
    return is_s3(cfg.data.dataset_path) and workload_of(cfg.training.workloads, workload).seconds_per_batch is None


def check_bucket_readers(cfg: SweepConfig) -> None:
    """What SweepConfig cannot see of a workload file over S3 (it names the file, not the model): an
    image model reads a bucket through the torch loader only, and is judged against linear, never a
    node ceiling it cannot have. A ConfigError naming the setting otherwise."""
    for w in workload_names(cfg.training.workloads):
        if not images_over_s3(cfg, w):
            continue
        loader = workload_update(cfg, w).get("loader", cfg.training.loader)
        if loader == "dali":
            raise ConfigError(
                f"workload {w}: loader dali (reader.loader or the suite's loader) reads no bucket with its bytes "
                f"counted; dataset_path {cfg.data.dataset_path} is an S3 location: set loader to torch"
            )
        if cfg.resolved_ideal() == "independent":
            raise ConfigError(
                f"ideal: independent; workload {w} reads images from {cfg.data.dataset_path}, where no node "
                "ceiling keeps its decode and leaves the store out: set ideal to linear"
            )


def node_slots(cfg: SweepConfig) -> int | None:
    """The ranks the suite's nodes offer without oversubscribing: the hosts' slots where hosts are
    listed, this node's cores / cpus_per_rank for the local launcher (the plan runs on the worker,
    which is the local launcher's node), None for Slurm without hosts (its nodes are not known
    before a job is granted)."""
    if cfg.where.hosts:
        return sum(h.slots for h in cfg.where.hosts)
    if cfg.where.launcher == "local":
        from bench.train.slots import cpu_slots

        return max(1, cpu_slots(cfg.where.cpus_per_rank))
    return None


def au_search_counts(slots: int | None, cap: int) -> list[int]:
    """The AU search's rank counts: 1, 2, 4, ... up to min(slots, cap), and that limit itself (the
    largest count the nodes hold); none where the slots are unknown or the search is off (cap 0)."""
    if not slots or cap <= 0:
        return []
    limit = min(slots, cap)
    counts, n = [], 1
    while n < limit:
        counts.append(n)
        n *= 2
    return [*counts, limit]


def scales_of(cfg: SweepConfig, workload: str) -> list[int]:
    """The rank counts a workload runs at, known at plan time (the DAG expands one task per scale): the
    suite's `gpus`, and for an emulated workload also the AU search's counts within the nodes' slots
    (au_search_max_ranks), so its accelerators-at-AU is measured up to where AU falls. A real model
    runs the suite's counts only."""
    counts = set(cfg.training.gpus)
    if cfg.probe.au_search_max_ranks and workload_of(cfg.training.workloads, workload).seconds_per_batch is not None:
        counts |= set(au_search_counts(node_slots(cfg), cfg.probe.au_search_max_ranks))
    return sorted(counts)


def dataset_dir(refs: Iterable[str], dataset_path: Path | str, workload: str) -> Path | str:
    """A real model's generated tree; an emulated workload's records (generated beside them, or the
    user's own folder read where it is). Under an S3 `dataset_path` (s3://BUCKET/PREFIX): the URL of the
    workload's folder in the bucket (s3_dataset_name)."""
    if is_s3(dataset_path):
        return f"{str(dataset_path).rstrip('/')}/{s3_dataset_name(refs, workload)}"
    if workload in DATASET_KIND:
        return dataset_path / DATASET_KIND[workload]
    spec = workload_of(refs, workload).spec
    if spec.dataset.layout != "records":
        return dataset_path / spec.dataset.layout
    if spec.dataset.path is not None:
        return spec.dataset.path
    return dataset_path / f"records-{workload}"


def s3_dataset_name(refs: Iterable[str], workload: str) -> str:
    """The workload's folder under an S3 prefix: the name the file layout gives it (`coco`,
    `records-NAME`); a workload reading the user's own records folder is uploaded as `records-NAME`."""
    data = None if workload in DATASET_KIND else workload_of(refs, workload).spec.dataset
    if data is not None and data.layout == "records":
        return f"records-{workload}"
    local = dataset_dir(refs, Path("/"), workload)
    return Path(local).relative_to("/").as_posix()


def suite_dataset_dir(cfg: SweepConfig, workload: str) -> Path | str:
    """dataset_dir of a suite's workload."""
    return dataset_dir(cfg.training.workloads, cfg.data.dataset_path, workload)


def workload_update(cfg: SweepConfig, workload: str) -> dict:
    """TrainConfig fields the workload sets: an emulated one's accelerator time, records and reader."""
    if workload in DATASET_KIND and not any(
        r.startswith("/") and workload_name(r) == workload for r in cfg.training.workloads
    ):
        return {"workload": workload}
    w = workload_of(cfg.training.workloads, workload)
    reader = w.spec.reader
    update: dict = {"workload": w.spec.compute.model or workload}
    if reader.batch is not None or w.batch_size is not None:
        update["batch_size"] = w.batch_size or reader.batch
    if reader.threads is not None:
        update["loader_threads"] = reader.threads
    if reader.loader is not None:
        update["loader"] = reader.loader
    if w.seconds_per_batch is not None:
        update |= {
            "accelerator_s": w.seconds_per_batch,
            "accelerator": w.accelerator,
            "gradient_bytes": w.gradient_bytes,
            "record_format": w.spec.dataset.format or _detected_format(suite_dataset_dir(cfg, workload)),
            "decode": reader.decode,
            "shuffle": reader.shuffle,
            "prefetch": reader.prefetch,
        }
    return update


def _detected_format(root: Path) -> str:
    from bench.data.records import load_records

    return load_records(root)["format"]


PROBE_FILE = "probe.json"


PROBE_MAX_BYTES = 16 << 20  # a probe's document is a few kB: levels, nodes, their figures
# What every probe document holds (bench.storage.fio_probe.probe, bench.suite.node_probe.probe_nodes): the
# keys the verdict and the report read whatever else a probe of its time carried.
PROBE_KEYS = {"ceiling_mb_s": (int, float), "conclusive": bool, "reason": str, "levels": list}


def read_probe(out: Path) -> dict | None:
    """The storage probe's result in a run folder, None where it did not complete or is not a probe's:
    read as every run-folder file is (bench.safe_fs.read_json: no link followed, no FIFO or device opened,
    bounded), a JSON object with PROBE_KEYS, each slow node's host a host name."""
    from bench.safe_fs import MalformedFile, read_json

    try:
        doc = read_json(out, PROBE_FILE, PROBE_MAX_BYTES, PROBE_KEYS)
        _check_slow_nodes(doc)
    except (OSError, MalformedFile):  # RefusedFile (a link, a FIFO, too large) is an OSError
        return None
    return doc


def _check_slow_nodes(doc: dict) -> None:
    """MalformedFile unless the probe's slow_nodes (absent in older probes) is a list of {host: a host name}."""
    from bench.launch.base import check_host
    from bench.safe_fs import MalformedFile

    slow = doc.get("slow_nodes", [])
    if not isinstance(slow, list) or not all(isinstance(s, dict) for s in slow):
        raise MalformedFile(f"{PROBE_FILE}: slow_nodes is not a list of objects")
    for i, node in enumerate(slow):
        check_host(node.get("host"), f"{PROBE_FILE} field 'slow_nodes[{i}].host'")


def run_spec(cfg: SweepConfig, suite_run_id: str, workload: str, gpus: int, variant: str = "") -> RunSpec:
    """One scale's launch; `variant` is a differential rerun of it ("warm", "synthetic") or its node
    ceiling ("independent": the same ranks and slots, no collective); a re-measure of either after
    interference ("remeasure", "remeasure-independent") is launched as the run it stands in for."""
    synthetic = cfg.train.synthetic or variant == SYNTHETIC
    if is_s3(cfg.data.dataset_path) and variant in (WARM, INDEPENDENT, REMEASURE_INDEPENDENT):
        # over S3 no page cache of the node can hold the records: the reruns that take storage out, and the
        # node ceiling, read none (an emulated accelerator's wait is the compute a rank has without them;
        # an image model, whose decode they would leave out too, is given neither: images_over_s3)
        synthetic = True
    update = workload_update(cfg, workload) | {
        "synthetic": synthetic,
        "data": None if synthetic else suite_dataset_dir(cfg, workload),
    }
    if variant in (WARM, INDEPENDENT, REMEASURE_INDEPENDENT) and not synthetic:
        update |= {"warm_cache": True, "drop_caches": False}
    if variant in (INDEPENDENT, REMEASURE_INDEPENDENT):
        # The node ceiling reads the page cache, not the storage under test: a throttled store must show
        # as the scale falling short of its node, never as a node ceiling as slow as the store.
        update |= {"independent": True}
    if variant in ("", REPEAT, REMEASURE):
        # The checkpoint phase and the saves run on the scale's own run (and its second run, which a
        # checkpoint regression is confirmed by), on the store under test; never on the reruns that
        # take storage out or measure the node.
        update |= checkpointing(cfg)
    # defaults left out: validated again it is the same TrainConfig (amp/precision reads which were given)
    train = TrainConfig.model_validate(cfg.train.model_dump(exclude_defaults=True) | update)
    name = f"{workload}-{gpus}" + (f"-{variant}" if variant else "")
    return RunSpec(
        run_id=run_prefix(suite_run_id) + name,
        train=train,
        ranks=gpus,
        output_dir=suite_dir(cfg.output_dir, suite_run_id) / name,
        where=cfg.where,
    )


def run_prefix(suite_run_id: str) -> str:
    """What every run id of a suite run starts with, its run folder's name following (':' and '+' out).
    The leftover sweep trusts a handle only with the run id its folder gives (bench.launch.leftovers)."""
    return f"{suite_run_id}-".replace(":", "-").replace("+", "-")


def checkpointing(cfg: SweepConfig) -> dict:
    """The TrainConfig fields of the suite's checkpoint settings (none when both are off): the phase and
    the saves write under the dataset path, the storage under test (each in a fresh folder it removes)."""
    spec, every = cfg.checkpointing.spec, cfg.checkpointing.checkpoint_every_steps
    if spec is None and not every:
        return {}
    return {
        "checkpoint": spec.model_dump() if spec is not None else None,
        "checkpoint_every_steps": every,
        "checkpoint_dir": cfg.data.dataset_path,
    }


RUN_DIR_KEPT = "._-"  # besides ASCII letters and digits: what a run folder's name keeps of the id
RUN_DIR_HASH_CHARS = 10  # hex digits of sha256(raw id) appended to a name that sanitising changed


def suite_dir(output_dir: Path, suite_run_id: str) -> Path:
    """Where one suite run's outputs live. Airflow run ids hold ':' and '+', which stay out of paths (each
    becomes '-'); whenever that changed anything, a short hash of the raw id is appended, so two ids that
    differ only there ('...T03:00:00' and '...T03-00-00') never share a folder, its handles and results.
    An id that needs no change keeps its own name, as before."""
    name = "".join(c if (c.isascii() and c.isalnum()) or c in RUN_DIR_KEPT else "-" for c in suite_run_id)
    if name != suite_run_id or name in ("", ".", ".."):
        name += "-" + hashlib.sha256(suite_run_id.encode()).hexdigest()[:RUN_DIR_HASH_CHARS]
    return output_dir / name


def new_suite_run_id() -> str:
    return "manual-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S")


def suite_run_identity(dag_id: str, run_id: str) -> str:
    """One suite run's identity: its DAG and Airflow's run_id (which alone repeats across suites on one
    schedule). It names the run folder, the jobs, the store rows and the pages."""
    return f"{dag_id}.{run_id}"


def airflow_run_id(dag_id: str | None, suite_run_id: str) -> str:
    """Airflow's run_id back from a suite run's identity (runs stored before it held the DAG stay as they are)."""
    return suite_run_id.removeprefix(f"{dag_id}.") if dag_id else suite_run_id
