"""The models: the setting groups (training, where, data, probe, checkpointing, bounds, alerts), each
setting defined once in its group; `SuiteSettings` (every setting a user gives a suite run) and the run's
`SweepConfig`, which hold the same group objects (`SettingGroups`); a launcher's `RunSpec`, which holds the
`where` group; and the rank's own `TrainConfig`, whose defaults and limits are read from the groups
(`suite_default`, `limits_of`).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Annotated

from pydantic import (
    BaseModel,
    ByteSize,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from bench.config.checkpoint import CheckpointSetting, CheckpointSpec, parse_setting
from bench.config.defaults import (
    DEFAULT_DATASET_IMAGES,
    DEFAULT_HISTORY_RUNS,
    DEFAULT_MAX_STEP_TIME_SPREAD,
    DEFAULT_MIN_BANDWIDTH_EFFICIENCY,
    DEFAULT_MIN_CHECKPOINT_EFFICIENCY,
    DEFAULT_MIN_SCALING_EFFICIENCY,
    DEFAULT_REGRESSION_TOLERANCE,
    DEFAULT_STRAGGLER_GAP,
    SUITE_SAMPLE_INTERVAL_S,
)
from bench.config.form import (
    DEPLOYMENT_PLACES,
    S_ADVANCED,
    S_ALERT,
    S_BOUNDS,
    S_DATA,
    S_TRAIN,
    S_WHAT,
    S_WHERE,
    SET_BY_DEPLOYMENT,
    FormConnId,
    FormDatasetPath,
    FormEmail,
    FormHost,
    FormInterface,
    FormName,
    FormPath,
    FormStorageCache,
    GpuCountKey,
    form_field,
)
from bench.config.types import (
    ENV_KEY_RE,
    ENV_VALUE_RE,
    MAX_INPUT_BATCH_BYTES,
    NAME_RE,
    SBATCH_DIRECTIVE_RE,
    WORKLOADS,
    Backend,
    Bind,
    CompileMode,
    Efficiency,
    Frozen,
    GpuCount,
    Host,
    HostSlots,
    Ideal,
    LauncherKind,
    LoaderKind,
    Precision,
    Preset,
    RecordFormat,
    RunId,
    S3Url,
    SafePath,
    StageOn,
    WorkloadRef,
    matching,
    parse,
    unique_hosts,
    unique_items,
)

_BYTE_SIZE = TypeAdapter(ByteSize)  # a size as written (512GiB) in bytes


class TrainingSettings(Frozen):
    """The `training` group of the settings. What runs at every scale and how each rank trains it (the rank template,
    `TrainConfig`, is built from it)."""

    workloads: tuple[WorkloadRef, ...] = form_field(
        WORKLOADS,
        S_WHAT,
        "Workloads",
        "Run at every scale: built-in names (`bench workloads list`: ssd, deeplabv3plus trained for real; "
        "emulated accelerators such as retinanet-b200) or absolute paths of workload files. A run's conf "
        f"may list built-ins and the suite's own workload files; any other file is set only in {DEPLOYMENT_PLACES}.",
        unique=True,
        min_length=1,
    )
    gpus: tuple[GpuCount, ...] = form_field(
        (1, 2),
        S_WHAT,
        "GPU counts",
        "Ranks (one per GPU) per scale; the smallest is the scaling baseline.",
        unique=True,
        min_length=1,
    )
    steps: int = form_field(
        20,
        S_TRAIN,
        "Measured steps (at least)",
        "Steps measured after warm-up; the run goes on until min_measure_s is reached too.",
        ge=1,
        le=10_000_000,
    )
    epochs: int | None = form_field(
        None,
        S_TRAIN,
        "Epochs (optional, replaces steps)",
        "Train whole epochs instead of a step count (epoch 1 is the storage figure).",
        ge=1,
        le=10_000,
    )
    min_measure_s: float = form_field(
        10.0,
        S_TRAIN,
        "Min measured seconds per scale",
        "Warm-up excluded. A scale measured for less is INCONCLUSIVE, never passed.",
        ge=0,
        le=86400,
    )
    batch_size: int = form_field(8, S_TRAIN, "Batch size per rank", ge=1, le=4096)
    image_size: int = form_field(128, S_TRAIN, "Image size", ge=32, le=2048)
    loader: LoaderKind = form_field("dali", S_TRAIN, "Input pipeline")
    preset: Preset = form_field("tiny", S_TRAIN, "Model preset")
    precision: Precision = form_field(
        "fp32",
        S_TRAIN,
        "Precision",
        "Autocast dtype. bf16 on CPUs and GPUs of compute capability 8.0 and up; fp16 runs with a GradScaler and "
        "needs CUDA GPUs (refused before launch on CPU nodes).",
    )
    backend: Backend = form_field(
        "auto",
        S_TRAIN,
        "Data-parallel backend",
        "horovod, or torch DDP (Gloo on CPU, NCCL on GPU); auto: Horovod where it imports, else DDP. The results' "
        "backend column names what ran.",
    )
    compile: CompileMode = form_field(
        "none",
        S_TRAIN,
        "Compile the step",
        "For launch-bound steps (GPU busy well under the step): torch.compile, or its CUDA-graph mode (GPU nodes, "
        "fixed shapes). Compile time is warm-up, never measured.",
    )
    warmup_steps: int = form_field(2, S_ADVANCED, "Warm-up steps (not measured)", ge=0, le=100_000)

    @field_validator("workloads", "gpus")
    @classmethod
    def _unique(cls, items: tuple) -> tuple:
        return unique_items(items)


class WhereSettings(Frozen):
    """The `where` group of the settings. Where the ranks run: the launcher, its nodes and their slots."""

    launcher: LauncherKind = form_field(
        "local",
        S_WHERE,
        "Launcher",
        "local: ranks on the worker; ssh: host list; slurm: sbatch.",
        set_by=SET_BY_DEPLOYMENT,
    )
    conn_id: FormConnId | None = form_field(
        None,
        S_WHERE,
        "SSH connection id",
        "ssh: keys and host keys; slurm: the login node (empty: Slurm CLI on the worker).",
        set_by=SET_BY_DEPLOYMENT,
    )
    hosts: tuple[FormHost, ...] = form_field(
        (), S_WHERE, "SSH hosts", "host[:slots] per entry, for the ssh launcher.", set_by=SET_BY_DEPLOYMENT
    )
    ssh_config: FormPath | None = form_field(
        None,
        S_WHERE,
        "SSH config file",
        "ssh (and a Slurm login node): an OpenSSH client config (ssh -F) for the hosts (User, Port, "
        "IdentityFile, UserKnownHostsFile); empty: the user's own ~/.ssh/config. With a connection, its "
        "key and host keys apply on top.",
        set_by=SET_BY_DEPLOYMENT,
    )
    rendezvous_interface: FormInterface | None = form_field(
        None,
        S_WHERE,
        "Rendezvous interface",
        "ssh/slurm: the first rank's host listens on this interface's address (a multi-homed node); "
        "empty: its address on the route to the other hosts (Slurm: its NodeAddr).",
        set_by=SET_BY_DEPLOYMENT,
    )
    partition: FormName | None = form_field(None, S_WHERE, "Slurm partition")
    account: FormName | None = form_field(None, S_WHERE, "Slurm account")
    gpus_per_node: int = form_field(0, S_WHERE, "GPUs per node", ge=0, le=16)
    cluster: FormName = form_field(
        "local",
        S_WHERE,
        "Cluster name",
        "History is kept per cluster: runs on different clusters never share a baseline "
        "(default: $SCALEWATCH_CLUSTER, else local). The report also reads this cluster's slow-node lines and "
        "storage probes.",
        set_by=SET_BY_DEPLOYMENT,
    )
    # None (an empty field): every rank on one node. 0 meant the same once and is still taken (see
    # _ranks_per_node); SweepConfig and RunSpec hold None, as history's config keys always have.
    ranks_per_node: int | None = form_field(None, S_WHERE, "Ranks per node (empty: all on one)", ge=0, le=256)
    cpus_per_rank: int = form_field(
        1,
        S_WHERE,
        "CPU cores per rank (nodes without GPUs)",
        "Each rank and its loader threads run on their own cores (GPU nodes: the GPU's NUMA cores).",
        ge=1,
        le=256,
    )
    oversubscribe: bool = form_field(
        False,
        S_WHERE,
        "Allow more ranks than slots",
        "Off: a request above the nodes' slots is refused before launch. On: rows are marked oversubscribed and "
        "never enter history.",
    )
    time_limit_s: int = form_field(3600, S_ADVANCED, "Time limit per scale (s)", ge=10, le=14 * 24 * 3600)

    @field_validator("ranks_per_node")
    @classmethod
    def _ranks_per_node(cls, value: int | None) -> int | None:
        return value or None  # 0, the form's old "all on one", is None's spelling

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[HostSlots, ...]) -> tuple[HostSlots, ...]:
        return unique_hosts(hosts)


class DataSettings(Frozen):
    """The `data` group of the settings. The dataset on the storage under test: where, how big, how staged, how cold."""

    dataset_path: FormDatasetPath | None = form_field(
        None,
        S_DATA,
        "Dataset path on the storage under test",
        "Default: $SCALEWATCH_HOME/data. s3://BUCKET/PREFIX puts the datasets in a bucket, image models read with "
        "the torch loader (the endpoint and keys from the deployment: aws_conn_id, else the worker's AWS "
        "variables; each node's own credentials).",
        set_by=SET_BY_DEPLOYMENT,
    )
    aws_conn_id: FormConnId | None = form_field(
        None,
        S_DATA,
        "S3 connection id",
        "With an s3:// dataset_path: the Airflow connection (the Amazon provider's aws type: login the access "
        "key, password the secret, extra endpoint_url and region_name) the worker stages into the bucket with; "
        "its endpoint reaches the ranks, its keys never leave the worker. Empty: the worker's AWS variables.",
        set_by=SET_BY_DEPLOYMENT,
    )
    storage_cache: FormStorageCache | None = form_field(
        None,
        S_DATA,
        "Storage cache size (optional)",
        "Declared cache of the storage system, e.g. 512GiB: a dataset it could hold is flagged, and its epoch-1 "
        "bandwidth is labelled cache-served, not storage bandwidth.",
    )
    dataset_images: int = form_field(
        DEFAULT_DATASET_IMAGES,
        S_DATA,
        "Images to generate",
        "Synthetic dataset size per workload. The default keeps epoch 1 reading for 5 s or more at 2 CPU ranks; a "
        "shorter epoch-1 read gives no bandwidth figure (bandwidth_note says so).",
        ge=1,
        le=100_000_000,
    )
    evict_dataset: bool = form_field(
        True,
        S_DATA,
        "Evict the dataset before epoch 1",
        "Drop the dataset's pages from each node's page cache before every scale, so epoch 1 reads from storage. "
        "Off: every scale after the first reads a warm cache and its bandwidth is flagged cache-distorted.",
    )
    stage_from: FormPath | None = form_field(
        None,
        S_DATA,
        "Stage from (optional)",
        "Copy an existing dataset instead of generating one.",
        set_by=SET_BY_DEPLOYMENT,
    )
    stage_on: StageOn | None = form_field(
        None,
        S_DATA,
        "Stage on",
        "node: generation, staging and the manifest check run on a compute node through the launcher "
        "(the worker need not mount the store); worker: on the Airflow worker. Empty: node for ssh and "
        "Slurm, worker for local.",
    )

    @property
    def storage_cache_bytes(self) -> ByteSize | None:
        """The declared storage cache in bytes (the setting keeps the size as written, e.g. 512GiB)."""
        return None if self.storage_cache is None else _BYTE_SIZE.validate_python(self.storage_cache)


class ProbingSettings(Frozen):
    """The `probe` group of the settings. What is measured beside the scales: the storage probe, node ceilings, the AU
    search and the reruns that confirm a cause or a regression."""

    probe_storage: bool = form_field(
        True,
        S_DATA,
        "Probe the storage's read ceiling (fio)",
        "After the last scale: fio on the compute nodes reads the staged files cold, one node at 1, 2, 4, "
        "... jobs, then 2, 4, ... nodes at once.",
    )
    ideal: Ideal = form_field(
        "auto",
        S_BOUNDS,
        "Ideal the scaling efficiency is judged against",
        "linear: N x one rank (each rank owns an accelerator); independent: the scale's ranks run at once as "
        "independent copies on the same slots (the node's own ceiling: shared cores, memory bandwidth, sibling "
        "threads); auto: linear on GPU nodes, independent on CPU nodes. Both efficiencies are always shown.",
    )
    ceilings: bool = form_field(
        True,
        S_BOUNDS,
        "Measure each scale's node ceiling",
        "After each scale above one rank, its ranks run again at once as independent copies (no collective): "
        "the expected throughput and the independent ideal come from it. One extra run per scale.",
    )
    confirm_causes: bool = form_field(
        True,
        S_BOUNDS,
        "Confirm a failing scale's cause by rerunning it",
        "A scale below its bound and its baseline run again with the dataset cached and with synthetic data (four "
        "extra runs per failing workload): which one removes the drop confirms or corrects the named bottleneck.",
    )
    confirm_regressions: bool = form_field(
        True,
        S_BOUNDS,
        "Confirm a regression by running the scale again",
        "A scale whose images/s (or checkpoint MB/s) falls under its history's regression floor runs once more "
        "after the last scale; a regression is called only when both runs fall under the floor (one extra run per "
        "suspected regression).",
    )
    probe_max_jobs: int = form_field(8, S_ADVANCED, "Storage probe: most fio jobs", ge=1, le=256)
    probe_seconds: float = form_field(3.0, S_ADVANCED, "Storage probe: seconds per level", ge=0.5, le=600)
    au_search_max_ranks: int = form_field(
        256,
        S_ADVANCED,
        "AU search: most emulated ranks (0: off)",
        "An emulated workload also runs at doubling rank counts (1, 2, 4, ... and the slots themselves) up to "
        "the slots its nodes offer (ssh: the hosts' slots; local: this node's cores / cpus_per_rank; Slurm "
        "without hosts: none known, so none added), and at most this many, so accelerators-at-AU is measured "
        "where AU falls. 0: only the suite's GPU counts. Real-model workloads run the suite's counts.",
        ge=0,
        le=4096,
    )


class CheckpointSettings(Frozen):
    """The `checkpointing` group of the settings. The checkpoint phase after each scale and the saves during its
    measured steps (bench.train.checkpointing)."""

    checkpoint: CheckpointSetting = form_field(
        "off",
        S_TRAIN,
        "Checkpoint phase after each scale",
        "off; model: every rank torch.saves its model and optimizer state; or {bytes_per_rank, writes, reads}: "
        "DLIO-shaped shards of that size (1 MiB-1 TiB). Each rank writes its shard (fsync per file), then reads "
        "another rank's back cold; write and read MB/s per scale (slowest rank), files removed after.",
    )
    checkpoint_every_steps: int = form_field(
        0,
        S_TRAIN,
        "Save a checkpoint every N measured steps (0: off)",
        "Each rank saves its model and optimizer state (torch.save, fsync) on the store under test every N measured "
        "steps: ckpt_stall_share is the share of step time the saves took. The saves are kept out of images/s.",
        ge=0,
        le=1_000_000,
    )

    @property
    def spec(self) -> CheckpointSpec | None:
        """The checkpoint phase as a CheckpointSpec (None: off); the setting keeps its JSON form."""
        return parse_setting(self.checkpoint)


class Thresholds(Frozen):
    """The `bounds` group of the settings. The bounds a scale is judged by: this group is the verdict's own view
    (SweepConfig.bounds), and a stored run's thresholds are read back as it (bench.results.stored)."""

    min_scaling_efficiency: Efficiency = form_field(
        DEFAULT_MIN_SCALING_EFFICIENCY,
        S_BOUNDS,
        "Min scaling efficiency",
        "Per scale vs the baseline. 0.7 on the embedded default: ten sweeps on a 2-core CPU machine measured 1->2 "
        "ranks at median 0.76 (SSD) and 0.73 (DeepLabv3+), range 0.58-0.87, under the box's own ~0.8 ceiling "
        "(docs/benchmarks.md). GPU clusters: 0.8-0.9.",
    )
    min_scaling_efficiency_by_gpus: dict[GpuCountKey, Efficiency] = form_field(
        {},
        S_BOUNDS,
        "Min scaling efficiency per GPU count (optional)",
        'A table {"16": 0.9, "32": 0.8, "64": 0.7}: a scale takes the bound of the smallest listed GPU count at '
        "or above it (the largest beyond); empty: the single bound above for all.",
    )
    max_step_time_spread: float = form_field(
        DEFAULT_MAX_STEP_TIME_SPREAD,
        S_BOUNDS,
        "Max step-time spread",
        "(p90 - p10) / median of a rank's step times; above it a scale is INCONCLUSIVE.",
        ge=0.01,
        le=100,
    )
    min_bandwidth_efficiency: Efficiency = form_field(
        DEFAULT_MIN_BANDWIDTH_EFFICIENCY,
        S_BOUNDS,
        "Min bandwidth efficiency",
        "Per-GPU epoch-1 read rate vs the baseline's, on valid (cold, storage-served) reads only.",
    )
    min_checkpoint_efficiency: Efficiency = form_field(
        DEFAULT_MIN_CHECKPOINT_EFFICIENCY,
        S_BOUNDS,
        "Min checkpoint efficiency",
        "Per-GPU checkpoint write and read MB/s vs the baseline's, against the same ideal as read bandwidth "
        "(judged only where the checkpoint phase ran).",
    )
    min_gpu_util: float | None = form_field(None, S_BOUNDS, "Min GPU utilisation % (empty: not checked)", ge=0, le=100)
    regression_tolerance: float = form_field(
        DEFAULT_REGRESSION_TOLERANCE,
        S_BOUNDS,
        "Regression tolerance",
        "Allowed drop vs the history median.",
        ge=0,
        le=1,
    )
    min_au: float | None = form_field(
        None,
        S_BOUNDS,
        "Min accelerator utilisation, AU (empty: not checked)",
        "Compute time / wall time per rank (MLPerf Storage uses 0.9): fails a scale whose ranks stall on input even "
        "while its throughput scales.",
        ge=0,
        le=1,
    )
    straggler_gap: float = form_field(
        DEFAULT_STRAGGLER_GAP,
        S_BOUNDS,
        "Straggler gap",
        "A rank working more than this fraction below the ranks' median is named.",
        ge=0.01,
        le=1,
    )
    min_supported_gpus: int | None = form_field(
        None,
        S_BOUNDS,
        "Planned GPUs the storage must feed (empty: not checked)",
        "Fails when fio's read ceiling / the largest measured per-GPU epoch-1 read rate gives fewer GPUs than this.",
        ge=1,
        le=1_000_000,
    )
    max_foreign_share: float | None = form_field(
        None,
        S_BOUNDS,
        "Max foreign work on a rank's cores (empty: 0.1)",
        "Share of a rank's slot cores that processes not the run's may use while it (or its node ceiling) trains: "
        "above it the figure is not the infrastructure's, so the scale is measured once more after the last scale, "
        "and INCONCLUSIVE naming the process, pid, core and node if the work is still there. Empty: 0.1.",
        gt=0,
        le=1,
    )
    history_runs: int = form_field(DEFAULT_HISTORY_RUNS, S_BOUNDS, "History runs (K)", ge=1, le=520)

    def scaling_bound(self, gpus: int) -> float:
        """The minimum scaling efficiency that applies at `gpus`: the bound of the smallest listed GPU count
        at or above it, the largest listed one's beyond the table (0.9 up to 16, 0.8 at 32, 0.7 at 64);
        an empty table: one bound for all."""
        table = self.min_scaling_efficiency_by_gpus
        if not table:
            return self.min_scaling_efficiency
        covering = [n for n in sorted(table) if n >= gpus]
        return table[covering[0] if covering else max(table)]


# An alert's recipients: a team list, not a mailing. One alert per run goes to each through the
# deployment's SMTP server; 5,000 of them was a mailing the suite should never send.
MAX_EMAIL_RECIPIENTS = 20


class AlertTargets(Frozen):
    """The `alerts` group of the settings. Where a failing or recovered run is sent: this group is the notifiers' own
    view (SweepConfig.alerts)."""

    # All three are the deployment's: a conf that nulled a connection silenced the suite's alert, and one that
    # listed recipients sent the run's failures, host names and report link to any address through the
    # deployment's SMTP server (issue 61).
    slack_conn_id: FormConnId | None = form_field(None, S_ALERT, "Slack webhook connection", set_by=SET_BY_DEPLOYMENT)
    smtp_conn_id: FormConnId | None = form_field(None, S_ALERT, "SMTP connection", set_by=SET_BY_DEPLOYMENT)
    email_to: tuple[FormEmail, ...] = form_field(
        (),
        S_ALERT,
        "E-mail recipients",
        f"At most {MAX_EMAIL_RECIPIENTS} addresses, each once.",
        unique=True,
        set_by=SET_BY_DEPLOYMENT,
        max_length=MAX_EMAIL_RECIPIENTS,
    )

    @field_validator("email_to")
    @classmethod
    def _unique(cls, items: tuple) -> tuple:
        return unique_items(items)


# The groups of SuiteSettings, by the name each has there. A setting's name is unique across them, so the
# flat names users write (the form, suite files, `bench sweep --config`) say which group each belongs to.
SETTING_GROUPS: dict[str, type[Frozen]] = {  # in the order the form lists a section's settings by
    "training": TrainingSettings,
    "data": DataSettings,
    "checkpointing": CheckpointSettings,
    "bounds": Thresholds,
    "probe": ProbingSettings,
    "alerts": AlertTargets,
    "where": WhereSettings,
}
GROUP_OF: dict[str, str] = {name: group for group, model in SETTING_GROUPS.items() for name in model.model_fields}
# Each setting's field (its default, limits and form metadata), by its flat name, in the form's order:
# by section, then as its group lists it.
_SECTIONS = (S_WHAT, S_WHERE, S_DATA, S_TRAIN, S_BOUNDS, S_ALERT, S_ADVANCED)
SETTING_FIELDS: dict[str, FieldInfo] = dict(
    sorted(
        ((name, model.model_fields[name]) for model in SETTING_GROUPS.values() for name in model.model_fields),
        key=lambda item: _SECTIONS.index((item[1].json_schema_extra or {})["section"]),
    )
)


class SettingGroups(Frozen):
    """The seven groups of settings (SETTING_GROUPS), each the one definition of its settings' types,
    defaults and limits: what a user gives (SuiteSettings) and what a run works from (SweepConfig) hold
    the same group objects. Flat names (the form's, suite files', a conf's) are routed to their group."""

    training: TrainingSettings = TrainingSettings()
    where: WhereSettings = WhereSettings()
    data: DataSettings = DataSettings()
    probe: ProbingSettings = ProbingSettings()
    checkpointing: CheckpointSettings = CheckpointSettings()
    bounds: Thresholds = Thresholds()
    alerts: AlertTargets = AlertTargets()

    @model_validator(mode="before")
    @classmethod
    def _by_group(cls, values):
        return by_group(values, SETTING_GROUPS)


def by_group(values, groups: Collection[str]):
    """`values` with each flat setting name of one of `groups` moved into its group (a group may also be
    given whole, as model_dump writes it, or both); a name of no such group stays where it is, for the
    model to take or refuse by name. What lets every user write a setting by its own name."""
    if not isinstance(values, dict):
        return values
    out = {key: value for key, value in values.items() if GROUP_OF.get(key) not in groups}
    for key, value in values.items():
        group = GROUP_OF.get(key)
        if group not in groups:
            continue
        whole = out.get(group, {})
        whole = whole.model_dump() if isinstance(whole, BaseModel) else whole
        if not isinstance(whole, dict):
            continue  # a group given as something else: pydantic refuses it, naming the group
        if key in whole:
            raise ValueError(f"{key}: given twice (by its name and in its group {group!r}); give it once")
        out[group] = whole | {key: value}
    return out


class SuiteSettings(SettingGroups):
    """Every setting a user gives a suite run, nested by group (SETTING_GROUPS), each with its one default:
    the DAG's Params are generated from these fields, suite files and `bench sweep --config` hold their
    flat names (routed to their group), and `sweep_config` turns them into the run's SweepConfig, which
    holds these very groups. Unknown names are refused (extra="forbid")."""

    @classmethod
    def defaults(cls) -> dict:
        """Every setting's default by its flat name, as the form and suite files show it (JSON values)."""
        return cls().flat()

    def flat(self) -> dict:
        """The settings by their flat names (JSON values), in the form's order."""
        groups = self.model_dump(mode="json")
        return {name: groups[GROUP_OF[name]][name] for name in SETTING_FIELDS}

    @classmethod
    def form_properties(cls) -> dict[str, dict]:
        """Each setting's JSON schema by its flat name (the form's Params are made from these)."""
        props: dict[str, dict] = {}
        for model in SETTING_GROUPS.values():
            schema = model.model_json_schema()
            if "$defs" in schema:  # the groups hold plain values only: a nested model would need its $defs
                raise TypeError(f"{model.__name__}: a setting's schema refers to $defs ({sorted(schema['$defs'])})")
            props |= schema["properties"]
        return {name: props[name] for name in SETTING_FIELDS}

    def sweep_config(self, home: Path | str, output_dir: Path | str, conf_bounds: tuple[str, ...] = ()) -> SweepConfig:
        """The run's config: these groups (the dataset placed under `home` where none is given), the rank
        template (rank_template) and the output folder, with the cross-field rules (hosts' slots, launcher
        needs) checked. `conf_bounds`: the bounds a run's conf set to other than its suite's (SweepConfig)."""
        dataset = self.data.dataset_path or Path(home) / "data"
        groups = {name: getattr(self, name) for name in SETTING_GROUPS}
        groups["data"] = self.data.model_dump() | {"dataset_path": dataset}
        run = {"train": self.rank_template(dataset), "output_dir": str(output_dir), "conf_bounds": conf_bounds}
        return parse(SweepConfig, groups | run, groups=tuple(SETTING_GROUPS))

    def rank_template(self, dataset: Path | str) -> dict:
        """TrainConfig's fields for every rank of the run, from the `training` group (each scale's launch
        sets its own workload and dataset folder: bench.suite.plan.run_spec). A TrainConfig default that is
        not the suite's is never left to stand: each field is passed (test_defaults_once holds it)."""
        training, where = self.training, self.where
        return {
            "workload": training.workloads[0] if training.workloads[0] in WORKLOADS else WORKLOADS[0],
            "steps": None if training.epochs else training.steps,
            "epochs": training.epochs,
            "warmup_steps": training.warmup_steps,
            "min_measure_s": training.min_measure_s,
            "loader_threads": where.cpus_per_rank,
            "batch_size": training.batch_size,
            "image_size": training.image_size,
            "loader": training.loader,
            "preset": training.preset,
            "data": dataset,
            "sample_interval_s": SUITE_SAMPLE_INTERVAL_S,
            "drop_caches": self.data.evict_dataset,
            "precision": training.precision,
            "compile": training.compile,
            "backend": training.backend,
        }


LIMITS = ("ge", "gt", "le", "lt")


def limits_of(model: type[BaseModel], name: str) -> dict:
    """The numeric limits (ge, gt, le, lt) of `model`'s field `name`, as Field keywords: what another
    model's field holding the same value takes instead of writing them again."""
    return _limits(model.model_fields[name])


def _limits(info: FieldInfo) -> dict:
    found = {}
    for item in info.metadata:
        found |= {key: getattr(item, key) for key in LIMITS if getattr(item, key, None) is not None}
    return found


def suite_default(setting: str, **own):
    """A field of another model that holds the setting `setting` (SETTING_FIELDS, whichever group has it):
    its default and its limits are written once, there. `own`: Field keywords of this field's own
    (validate_default; a limit only where this model refuses what the settings take, as ranks_per_node's
    0, and the test lists each)."""
    info = SETTING_FIELDS[setting]
    return Field(info.get_default(call_default_factory=True), **(_limits(info) | own))


class TrainConfig(Frozen):
    """One rank's training run; the same object every launcher hands its ranks as `train.json`
    (bench.launch.train_spec) and `bench train`'s flags build for a person.

    A setting the suite also has takes the suite's default (suite_default). Three keep a default of
    their own, for `bench train` run by hand and the tests' single ranks; the suite passes its value
    for each explicitly (SuiteSettings.rank_template), so a suite run never sees these:
    - steps: None, since a rank is given steps or epochs and a default step count would clash with
      --epochs (the suite's 20 is its own measured-steps floor);
    - image_size: 64, a quick rank on a CPU core (the suite's 128 is the size its history is kept at);
    - min_measure_s: 0, so `bench train --steps N` runs exactly N steps (the suite's 10 s floor is a
      verdict rule: figures measured for less are noise);
    loader_threads (2) is not a suite setting: the suite gives each rank one per core it owns
    (cpus_per_rank), a rank run by hand is not pinned to any.
    """

    # A real model's name, or an emulated workload's (its accelerator_s set)
    workload: Annotated[str, matching(NAME_RE, "workload")]
    # A folder, or s3://BUCKET/PREFIX for a dataset staged into a bucket (issue 64: an emulated workload's
    # records, an image model's files; the rank reads it with its node's own credentials:
    # bench.data.location.node_s3_client)
    data: S3Url | SafePath | None = None
    synthetic: bool = False
    preset: Preset = suite_default("preset")
    batch_size: int = suite_default("batch_size")
    image_size: int = Field(64, **limits_of(TrainingSettings, "image_size"))
    warmup_steps: int = suite_default("warmup_steps")
    steps: int | None = Field(None, **limits_of(TrainingSettings, "steps"))
    epochs: int | None = suite_default("epochs")
    loader: LoaderKind = suite_default("loader")
    # the suite fills it from cpus_per_rank (one loader thread per core a rank owns): the same limits
    loader_threads: int = Field(2, **limits_of(WhereSettings, "cpus_per_rank"))
    metrics_out: SafePath | None = None
    seed: int = Field(0, ge=0, le=2**31 - 1)
    lr: float = Field(0.01, gt=0, le=10)
    sample_interval_s: float = Field(1.0, gt=0, le=60)
    # Measured seconds (warm-up excluded) below which a figure is noise: with `steps`, the run goes on
    # past them until this long has been measured too (bounded by MAX_EXTENSION x min_measure_s).
    min_measure_s: float = Field(0.0, **limits_of(TrainingSettings, "min_measure_s"))
    sampler: bool = True
    # Evict the dataset's own pages before epoch 1: without it every scale after the first reads a warm
    # cache and no epoch-1 figure is a storage figure (the suite's evict_dataset).
    drop_caches: bool = suite_default("evict_dataset")
    # Read every dataset file once before epoch 1 (one rank per node): the differential rerun that takes
    # storage out of a failing scale (DS-Analyzer's warm-cache run). Its bytes are the page cache's.
    warm_cache: bool = False
    # fp32, bf16 or fp16 autocast (fp16 with a GradScaler, CUDA only); `amp` is the older switch, kept
    # as an alias that picks bf16 where the device has it, else fp16 (bench.train.precision).
    precision: Precision = suite_default("precision")
    amp: bool = False
    # The scale's ranks as independent single-rank copies on the same slots at the same time: no gradient
    # collective between them (ranks still meet at epoch edges). Its images/s is the node's ceiling.
    independent: bool = False
    # Opt-in for launch-bound steps: torch.compile, or its CUDA-graph mode; warm-up covers the compile.
    compile: CompileMode = suite_default("compile")
    # Horovod or torch DDP; auto: Horovod where it imports, else DDP (the summary's `backend` names what ran).
    backend: Backend = suite_default("backend")
    # auto: ranks started unpinned by an outside launcher (horovodrun, torchrun, srun) split their
    # node's allowed cores by local rank themselves; none: they run where they were started.
    bind: Bind = "none"
    # The checkpoint phase after the measured steps and the saves during them (bench.train.checkpointing),
    # both on `checkpoint_dir` (the store under test). Off unless the suite sets them for a scale's run.
    checkpoint: CheckpointSpec | None = suite_default("checkpoint", validate_default=True)
    checkpoint_every_steps: int = suite_default("checkpoint_every_steps")
    checkpoint_dir: S3Url | SafePath | None = None

    @field_validator("checkpoint", mode="before")
    @classmethod
    def _checkpoint(cls, value) -> CheckpointSpec | None:
        return parse_setting(value)

    run_nonce: Annotated[str, matching(re.compile(r"^[0-9a-f]{1,64}$"), "run nonce")] | None = None
    # An emulated rank (bench.workloads.emulate): the records reader's real reads, then a timed wait of
    # accelerator_s per batch instead of forward and backward; `accelerator` names the profile.
    accelerator_s: float | None = Field(None, gt=0, le=3600)
    accelerator: Annotated[str, matching(re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.@-]{0,127})?$"), "accelerator")] = ""
    gradient_bytes: int = Field(0, ge=0, le=1 << 40)  # allreduced per emulated step (0: no collective data)
    record_format: RecordFormat | None = None  # None: detected from the files (bench.data.records)
    decode: bool = False
    shuffle: bool = True
    prefetch: int = Field(2, ge=1, le=64)

    @model_validator(mode="after")
    def _real_or_emulated(self) -> TrainConfig:
        if self.accelerator_s is None and self.workload not in WORKLOADS:
            raise ValueError(
                f"workload: {self.workload!r} is not a model ({', '.join(WORKLOADS)}); an emulated workload needs "
                "accelerator_s"
            )
        return self

    @model_validator(mode="after")
    def _batch_fits(self) -> TrainConfig:
        batch = self.batch_size * 3 * self.image_size**2 * 4
        if batch > MAX_INPUT_BATCH_BYTES:
            raise ValueError(
                f"batch_size/image_size: a {self.batch_size} x 3 x {self.image_size}^2 float32 input batch is "
                f"{batch / 2**30:.1f} GiB per rank, above the {MAX_INPUT_BATCH_BYTES / 2**30:.0f} GiB limit "
                "(no accelerator holds that with its activations)"
            )
        return self

    @model_validator(mode="after")
    def _amp_alias(self) -> TrainConfig:
        if self.amp and "precision" in self.model_fields_set and self.precision == "fp32":
            raise ValueError("amp/precision: amp asks for mixed precision and precision fp32 for none; give one")
        return self

    @model_validator(mode="after")
    def _data_or_synthetic(self) -> TrainConfig:
        if not self.synthetic and self.data is None:
            raise ValueError("data: a dataset directory is required unless synthetic is set")
        if self.steps is None and self.epochs is None:
            raise ValueError("steps/epochs: give one of them")
        if self.steps is not None and self.epochs is not None:
            raise ValueError("steps/epochs: give only one of them")
        if self.warm_cache and (self.drop_caches or self.synthetic):
            raise ValueError("warm_cache: a warm-cache run reads the dataset; set drop_caches and synthetic false")
        return self

    @model_validator(mode="after")
    def _s3_is_never_warmed(self) -> TrainConfig:
        if isinstance(self.data, str) and self.warm_cache:
            raise ValueError(f"warm_cache: {self.data} is an S3 location; no page cache of this node holds it")
        return self

    @model_validator(mode="after")
    def _checkpoint_needs_a_folder(self) -> TrainConfig:
        if (self.checkpoint is not None or self.checkpoint_every_steps) and self.checkpoint_dir is None:
            raise ValueError("checkpoint_dir: the checkpoint phase and checkpoint_every_steps need a folder")
        return self


class RunSpec(Frozen):
    """What a launcher needs for one multi-rank run: the rank's TrainConfig, the rank count, the run folder,
    and the suite's `where` group itself (nodes, slots, Slurm's partition and account, limits). Where-names
    given flat (`RunSpec(hosts=...)`) go to the group, as a user's settings do."""

    run_id: RunId
    train: TrainConfig
    ranks: GpuCount
    output_dir: SafePath
    where: WhereSettings = WhereSettings()
    env: dict[str, str] = Field(default_factory=dict)
    sbatch_directives: tuple[str, ...] = ()
    rendezvous_addr: Host | None = None  # Slurm: the first node's address to listen on (default its NodeAddr)
    python: SafePath | None = None
    nonce: Annotated[str, matching(re.compile(r"^[0-9a-f]{0,64}$"), "nonce")] = ""

    @model_validator(mode="before")
    @classmethod
    def _by_group(cls, values):
        return by_group(values, ("where",))

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        for key, value in env.items():
            if not ENV_KEY_RE.fullmatch(key):
                raise ValueError(f"env key {key!r} does not match {ENV_KEY_RE.pattern}")
            if not ENV_VALUE_RE.fullmatch(value):
                raise ValueError(f"env value for {key} does not match {ENV_VALUE_RE.pattern}")
        return env

    @field_validator("sbatch_directives")
    @classmethod
    def _directives(cls, items: tuple[str, ...]) -> tuple[str, ...]:
        for item in items:
            if not SBATCH_DIRECTIVE_RE.fullmatch(item):
                raise ValueError(f"sbatch directive {item!r} does not match {SBATCH_DIRECTIVE_RE.pattern}")
        return items


class SweepConfig(SettingGroups):
    """One suite run: the settings' groups themselves (`cfg.where.hosts`, `cfg.bounds`, `cfg.probe.ceilings`),
    the dataset's place always given (`data.dataset_path`), the rank template (`train`, which each scale's
    launch completes) and the run's output folder. The DAG's first task and `bench sweep` make it
    (SuiteSettings.sweep_config); each later task validates the plan's dump of it with this model."""

    generate: bool = True
    train: TrainConfig
    output_dir: SafePath
    # The `bounds` settings a run's conf set to other than its suite's (bench.config.trust.conf_bounds): the
    # run is judged by them, and kept out of the history every run of the series is judged against
    # (bench.suite.record.history_view), so a conf's looser bounds never move the shared baseline.
    conf_bounds: tuple[str, ...] = ()

    @field_validator("conf_bounds")
    @classmethod
    def _bounds_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [n for n in names if n not in Thresholds.model_fields]
        if unknown:
            raise ValueError(f"not bounds settings: {', '.join(unknown)}")
        return names

    @property
    def enters_history(self) -> bool:
        """Whether this run's rows and probe may enter the shared history: judged by its suite's bounds."""
        return not self.conf_bounds

    @model_validator(mode="after")
    def _dataset_placed(self) -> SweepConfig:
        if self.data.dataset_path is None:  # the group's default, so an after-model check, not a field's
            raise ValueError("dataset_path: a run's dataset must have a place (SuiteSettings puts it under home)")
        return self

    @model_validator(mode="after")
    def _what_reads_a_bucket(self) -> SweepConfig:
        """Over S3 (issue 64): emulated workloads' records read by ranged GETs, the image models' files by
        whole GETs through the torch loader (bench.loaders.s3_images says why not DALI's), checkpoints as
        objects; staged by the worker."""
        if not isinstance(self.data.dataset_path, str):
            if self.data.aws_conn_id:
                raise ValueError(
                    f"aws_conn_id: names the S3 connection {self.data.aws_conn_id!r}, but dataset_path "
                    f"{self.data.dataset_path} is a folder: set dataset_path to s3://BUCKET/PREFIX or clear it"
                )
            return self
        models = [w for w in self.training.workloads if w in WORKLOADS]
        if models and not self.train.synthetic and self.training.loader == "dali":
            raise ValueError(
                f"loader: dali; dataset_path {self.data.dataset_path} is an S3 location, where {', '.join(models)} "
                "read(s) through the torch loader, whose GETs count the bytes each rank received (DALI's S3 "
                "reader counts none): set loader to torch"
            )
        if models and not self.train.synthetic and self.probe.ideal == "independent":
            raise ValueError(
                f"ideal: independent; {', '.join(models)} read(s) images from {self.data.dataset_path}, where no "
                "node ceiling keeps their decode and leaves the store out: set ideal to linear or auto"
            )
        if self.data.stage_on == "node":
            raise ValueError(
                f"stage_on: node stages onto a node's file system; {self.data.dataset_path} is a bucket, which "
                "the worker uploads to over S3: set stage_on to worker or leave it empty"
            )
        return self

    @field_validator("training")
    @classmethod
    def _non_empty(cls, training: TrainingSettings) -> TrainingSettings:
        for name in ("workloads", "gpus"):
            if not getattr(training, name):
                raise ValueError(f"{name}: must list at least one value")
        return training

    def resolved_stage_on(self) -> StageOn:
        """stage_on, an empty one resolved by launcher: node for ssh and Slurm (where the store is mounted
        on the compute nodes, perhaps not on the worker), worker for local (the worker is the node)."""
        if isinstance(self.data.dataset_path, str):  # a bucket: the worker uploads it over S3 (_what_reads_a_bucket)
            return "worker"
        return self.data.stage_on or ("worker" if self.where.launcher == "local" else "node")

    def resolved_ideal(self) -> str:
        """The ideal this suite's verdicts use: `auto` is linear on GPU slots, independent on CPU slots
        (linear too where no node ceiling is measured, and for image models over S3: their node ceiling runs
        synthetic there, with no page cache to read from, so it would leave out the JPEG decode that their
        scales pay on the same cores)."""
        if self.probe.ideal != "auto":
            return self.probe.ideal
        over_s3 = isinstance(self.data.dataset_path, str) and any(w in WORKLOADS for w in self.training.workloads)
        linear = self.where.gpus_per_node > 0 or not self.probe.ceilings or over_s3
        return "linear" if linear else "independent"

    @model_validator(mode="after")
    def _gpu_only_settings(self) -> SweepConfig:
        if self.where.gpus_per_node == 0 and self.train.precision == "fp16":
            raise ValueError(
                "precision: fp16 needs CUDA GPUs and this suite's nodes have none (gpus_per_node 0); "
                "allowed here: fp32, bf16"
            )
        if self.where.gpus_per_node == 0 and self.train.compile == "cuda_graphs":
            raise ValueError(
                "compile: cuda_graphs needs CUDA GPUs and this suite's nodes have none (gpus_per_node 0); "
                "allowed here: none, torch_compile"
            )
        return self

    @model_validator(mode="after")
    def _ideal_needs_ceilings(self) -> SweepConfig:
        if self.probe.ideal == "independent" and not self.probe.ceilings:
            raise ValueError("ideal: 'independent' judges each scale against its node ceiling; set ceilings true")
        return self

    @model_validator(mode="after")
    def _launcher_needs(self) -> SweepConfig:
        where, gpus = self.where, self.training.gpus
        if where.ssh_config is not None and not (
            where.launcher == "ssh" or (where.launcher == "slurm" and where.conn_id)
        ):
            raise ValueError(
                f"ssh_config: launcher {where.launcher}{' without conn_id' if where.launcher == 'slurm' else ''} "
                "runs no ssh; allowed with launcher ssh, or slurm with conn_id (its login node)"
            )
        if where.launcher == "ssh" and not where.hosts:
            raise ValueError("hosts: the ssh launcher needs at least one host[:slots]")
        if where.launcher == "ssh":
            capacity = sum(h.slots for h in where.hosts)
            if max(gpus) > capacity and not where.oversubscribe:
                raise ValueError(
                    f"gpus: {max(gpus)} ranks exceed the {capacity} slots of hosts "
                    f"({', '.join(f'{h.host}:{h.slots}' for h in where.hosts)}); set oversubscribe to allow it"
                )
        return self
