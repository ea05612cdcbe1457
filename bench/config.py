"""Typed, validated configuration: every user input passes through these models once.

Airflow Params, CLI flags and config files are all turned into these models at the edge, then the
models are passed down; nothing deeper re-reads the environment or re-validates strings.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from bench.errors import ConfigError

logger = logging.getLogger(__name__)

# Each set of choices is written once, as a Literal; the tuples, the form's enums and the CLI's
# `choices=` (choices_of) are read from it.
Workload = Literal["ssd", "deeplabv3plus"]  # the models trained for real
WORKLOADS: tuple[str, ...] = get_args(Workload)
# Formats a workload file's records may have (bench.data.records); tar shards and TFRecord are not
# among them: no library this project keeps reads them (bench/workloads/spec.py says why).
RecordFormat = Literal["jpeg", "png", "npz", "raw"]
# Built-in workload files (bench/workloads/builtin/NAME.yaml): a suite names them, or gives a file's path.
BUILTIN_WORKLOADS_DIR = Path(__file__).resolve().parent / "workloads" / "builtin"
LoaderKind = Literal["dali", "torch"]
Preset = Literal["tiny", "small", "production"]
LauncherKind = Literal["local", "ssh", "slurm"]
StageOn = Literal["node", "worker"]
Backend = Literal["horovod", "ddp", "auto"]
BACKENDS: tuple[str, ...] = get_args(Backend)
Bind = Literal["auto", "none"]
LAUNCHERS: tuple[str, ...] = get_args(LauncherKind)
Precision = Literal["fp32", "bf16", "fp16"]
CompileMode = Literal["none", "torch_compile", "cuda_graphs"]
Ideal = Literal["auto", "linear", "independent"]

# Strict patterns: values that end up on a remote command line must match these, and are shlex-quoted
# as well. A value that does not match is refused before anything runs.
HOST_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
PATH_RE = re.compile(r"^/[A-Za-z0-9._/+@,=-]*$")
ENV_KEY_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")
ENV_VALUE_RE = re.compile(r"^[A-Za-z0-9._/:,=@+-]{0,256}$")
SBATCH_DIRECTIVE_RE = re.compile(r"^--[a-z][a-z-]{1,40}(=[A-Za-z0-9._:,/@+-]{1,128})?$")
CONN_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,254}$")
EMAIL_RE = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$")


def unique_items(items: tuple) -> tuple:
    """A list setting whose values name things (workloads, GPU counts): a repeat is a typo, never a wish."""
    if len(set(items)) != len(items):
        raise ValueError(f"values must be unique, got {list(items)}")
    return items


def _unique_hosts(hosts: tuple) -> tuple:
    """Two entries for one host would give two ranks the same local rank (the same GPU and cores)."""
    seen: set[tuple[str, int]] = set()
    for h in hosts:
        if (h.host, h.port) in seen:
            raise ValueError(f"host {h.host} is listed twice; give it once with its total slots ({h.host}:N)")
        seen.add((h.host, h.port))
    return hosts


def _matching(pattern: re.Pattern[str], what: str):
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{what} {value!r} does not match {pattern.pattern}")
        return value

    return AfterValidator(check)


def _safe_path(value: Path) -> Path:
    text = str(value)
    if not PATH_RE.fullmatch(text) or "/../" in text + "/" or text.endswith("/.."):
        raise ValueError(
            f"path {text!r} must be absolute and use only letters, digits and ._/+@,=- "
            "(no spaces, no '..', no shell metacharacters)"
        )
    return value


Host = Annotated[str, _matching(HOST_RE, "host")]


def _workload_ref(value: str) -> str:
    """A built-in workload's name, or the absolute path of a workload file (.yaml): the file's content is
    validated where the suite is planned (bench.workloads.spec.load), its name and existence here."""
    if value.startswith("/"):
        _safe_path(Path(value))
        if Path(value).suffix not in (".yaml", ".yml"):
            raise ValueError(f"workload file {value!r} must end in .yaml or .yml")
        if not Path(value).is_file():
            raise ValueError(f"workload file {value!r} does not exist")
        return value
    if value not in BUILTIN_WORKLOADS:
        known = ", ".join(BUILTIN_WORKLOADS)
        raise ValueError(f"workload {value!r} is not a built-in ({known}) nor an absolute file path")
    return value


# The built-ins' names (a listing of one package folder: no heavier than the import itself). The form's
# JSON schema carries them as a pattern, so the UI and the REST API refuse an unknown name before a run
# is created, as they did when the workloads were a fixed choice; a workload file is an absolute .yaml path.
BUILTIN_WORKLOADS: tuple[str, ...] = tuple(sorted(p.stem for p in BUILTIN_WORKLOADS_DIR.glob("*.yaml")))
# Built-in names are plain words ([a-z0-9-]: no regex escapes, which browsers' unicode-mode regexes refuse)
WORKLOAD_REF_PATTERN = "^(" + "|".join(n for n in BUILTIN_WORKLOADS if re.fullmatch(r"[a-z0-9-]+", n))
WORKLOAD_REF_PATTERN += r"|/.+\.ya?ml)$"
WorkloadRef = Annotated[
    str,
    AfterValidator(_workload_ref),
    WithJsonSchema({"type": "string", "pattern": WORKLOAD_REF_PATTERN}),
]
# Linux interface names: up to 15 characters, no '/', no white space (IFNAMSIZ); ours are a safe subset
INTERFACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}$")
InterfaceName = Annotated[str, _matching(INTERFACE_RE, "interface name")]
SlurmName = Annotated[str, _matching(NAME_RE, "name")]
SafePath = Annotated[Path, AfterValidator(_safe_path)]
ConnId = Annotated[str, _matching(CONN_ID_RE, "connection id")]
RunId = Annotated[str, _matching(RUN_ID_RE, "run id")]
Email = Annotated[str, _matching(EMAIL_RE, "e-mail address")]


# A per-rank input batch above this cannot train on any current accelerator (its activations are many
# times larger); a form value such as batch_size=4096 at image_size=2048 (192 GiB) is refused at the edge.
MAX_INPUT_BATCH_BYTES = 8 * 2**30

# Limits shared by element types (a tuple's items, a table's keys and values), written once: a GPU count
# (a scale's ranks, a per-GPU-count table's key, the baseline) and an efficiency bound (a scale's figure
# over its ideal; above 1 for superlinear scaling).
GpuCount = Annotated[int, Field(ge=1, le=4096)]
Efficiency = Annotated[float, Field(ge=0, le=1.5)]


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def default_of(model: type[BaseModel], name: str):
    """`model`'s default for field `name` (a default_factory called): what a flag, another model or a
    test takes instead of writing the value again."""
    return model.model_fields[name].get_default(call_default_factory=True)


def choices_of(model: type[BaseModel], name: str) -> tuple:
    """The values field `name`'s Literal allows (inside Optional, tuple or Annotated too): a flag's
    `choices=`, read from the one type that defines them."""

    def literal_args(tp) -> tuple:
        if get_origin(tp) is Literal:
            return get_args(tp)
        for arg in get_args(tp):
            if found := literal_args(arg):
                return found
        return ()

    found = literal_args(model.model_fields[name].annotation)
    if not found:
        raise TypeError(f"{model.__name__}.{name} is not a Literal field")
    return found


# Defaults that both the suite's settings (SuiteSettings: Params, suite files, `bench sweep`) and the
# internal config (Thresholds, used by `bench evaluate` too) take: each one is written here only.
# 0.7: ten sweeps on a 2-core CPU machine measured 1->2 ranks at median 0.76 (SSD) and 0.73
# (DeepLabv3+), under the box's own ~0.8 ceiling (docs/benchmarks.md); the 0.8 once here was never
# what a DAG run used. Epoch-1 bytes per image are fixed, so on a cold read bandwidth scales as
# throughput does: its bound is the same number (the 0.4 the form had let bandwidth fall 43% below
# throughput's bound unflagged; the config's 0.7 was the right one).
DEFAULT_MIN_SCALING_EFFICIENCY = 0.7
DEFAULT_MIN_BANDWIDTH_EFFICIENCY = 0.7
# Checkpoint write and read MB/s are held to the same ideal and the same number as read bandwidth: a
# store whose aggregate write rate does not grow with the ranks writing to it fails as one whose reads
# do not.
DEFAULT_MIN_CHECKPOINT_EFFICIENCY = DEFAULT_MIN_BANDWIDTH_EFFICIENCY
DEFAULT_MAX_STEP_TIME_SPREAD = 1.0
DEFAULT_REGRESSION_TOLERANCE = 0.1
DEFAULT_HISTORY_RUNS = 8
DEFAULT_STRAGGLER_GAP = 0.10
# MLPerf Storage's accelerator utilisation floor: a workload's min_au where neither it nor the suite sets
# one, an accelerator profile's own floor, and the AU reading of the storage sizing.
MLPERF_STORAGE_MIN_AU = 0.9
# The suite's ranks sample CPU, I/O and memory every 0.25 s (a rank run by hand: TrainConfig's 1 s): the
# sampler's share of a 2-core box stays small while a 5 s epoch-1 read still gets 20 samples. Not a setting.
SUITE_SAMPLE_INTERVAL_S = 0.25


# --- The suite's settings: the one definition behind the Airflow form, suite files and `bench sweep` ---


# A form pattern must refuse what fullmatch refuses: JSON schema validators search with `$`, which in
# Python also matches before a trailing newline; `(?![\s\S])` is "end of text" in Python and ECMA alike.
def form_pattern(regex: re.Pattern[str] | str) -> str:
    text = regex.pattern if isinstance(regex, re.Pattern) else regex
    return "^(?:" + text.removeprefix("^").removesuffix("$") + r")(?![\s\S])"


class _FormPattern:
    """Annotated marker: the form's JSON schema gets this pattern (validation itself is the
    AfterValidator beside it, Python's `re`, which the form schema's lookaheads need)."""

    def __init__(self, regex: re.Pattern[str]) -> None:
        self.regex = regex

    def __get_pydantic_json_schema__(self, core_schema, handler):
        schema = handler(core_schema)
        schema["pattern"] = form_pattern(self.regex)
        return schema


HOST_SLOTS_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,2})?$")
STORAGE_CACHE_RE = re.compile(r"^[0-9]+(\.[0-9]+)?\s*([KMGTP]i?B|B)?$")
GPU_COUNT_KEY_RE = re.compile(r"^[1-9][0-9]{0,3}$")

FormHost = Annotated[str, _matching(HOST_SLOTS_RE, "host[:slots]"), _FormPattern(HOST_SLOTS_RE)]
FormName = Annotated[str, _matching(NAME_RE, "name"), _FormPattern(NAME_RE)]
FormInterface = Annotated[str, _matching(INTERFACE_RE, "interface name"), _FormPattern(INTERFACE_RE)]
FormConnId = Annotated[str, _matching(CONN_ID_RE, "connection id"), _FormPattern(CONN_ID_RE)]
FormPath = Annotated[str, AfterValidator(lambda v: str(_safe_path(Path(v)))), _FormPattern(PATH_RE)]
FormEmail = Annotated[str, _matching(EMAIL_RE, "e-mail address"), _FormPattern(EMAIL_RE)]
FormStorageCache = Annotated[str, _matching(STORAGE_CACHE_RE, "storage cache size"), _FormPattern(STORAGE_CACHE_RE)]

S_WHAT, S_WHERE, S_DATA, S_TRAIN, S_BOUNDS, S_ALERT, S_ADVANCED = (
    "What to sweep",
    "Where to launch",
    "Dataset",
    "Training",
    "Bounds",
    "Alerts",
    "Advanced",
)


# --- Who may set a setting: the trust boundary, written once -----------------------------------------
# Whoever may trigger a run (the form, the REST API, a conf) is not whoever runs the worker. A setting
# that names a file or folder the worker (or a node, through it) reads or writes, or that changes how a
# command is started there, is the deployment's alone: OpenSSH runs a config file's `Match exec` lines
# while it reads it, so a conf naming any readable file as `ssh_config` ran commands on the worker
# (issue 48). Such a setting is set by a suite file or the deployment (the embedded default's
# environment, Airflow connections); a conf that gives it another value is refused before anything runs
# (refuse_deployment_settings), and the form shows the suite's value, read-only (scalewatch.params).
SetBy = Literal["run", "deployment"]
SET_BY_RUN: SetBy = "run"
SET_BY_DEPLOYMENT: SetBy = "deployment"
RUN_PLACES = "a run's conf (the trigger form, the REST API, scripts/run-once.sh)"
DEPLOYMENT_PLACES = "a suite file ($SCALEWATCH_SUITES) or the deployment (the environment, Airflow connections)"


def _ui(
    default,
    section: str,
    title: str,
    description: str | None = None,
    unique: bool = False,
    set_by: SetBy = SET_BY_RUN,
    **limits,
):
    """A setting with its form metadata beside it (section and title are the form's, nothing else's) and
    who may set it (`set_by`: a run's conf, or only a suite file and the deployment)."""
    extra: dict = {"section": section, "title": title, "set_by": set_by} | ({"uniqueItems": True} if unique else {})
    if set_by == SET_BY_DEPLOYMENT:
        where = f"Set only in {DEPLOYMENT_PLACES}; a run's conf cannot change it."
        description = f"{description} {where}" if description else where
    return Field(default, description=description, json_schema_extra=extra, **limits)


# --- The checkpoint phase (issue 40): what each rank writes and reads back after a scale's training ---

MIN_BYTES_PER_RANK = 1 << 20
MAX_BYTES_PER_RANK = 1 << 40


class CheckpointSpec(Frozen):
    """One scale's checkpoint phase. `size`: shards of `bytes_per_rank` per rank and checkpoint, laid
    out as DLIO lays them out; `model`: torch.save of the model's and optimizer's state. MLPerf Storage
    writes 10 checkpoints, then reads 10: the defaults."""

    mode: Literal["size", "model"]
    bytes_per_rank: Annotated[ByteSize, Field(ge=MIN_BYTES_PER_RANK, le=MAX_BYTES_PER_RANK)] | None = None
    writes: int = Field(10, ge=1, le=100)
    reads: int = Field(10, ge=1, le=100)

    @model_validator(mode="after")
    def _size_matches_mode(self) -> CheckpointSpec:
        if self.mode == "size" and self.bytes_per_rank is None:
            raise ValueError("bytes_per_rank: required when checkpoint is a size (1 MiB to 1 TiB per rank)")
        if self.mode == "model" and self.bytes_per_rank is not None:
            raise ValueError("bytes_per_rank: a model checkpoint is as large as its state; give one or the other")
        return self


def parse_setting(value: Any) -> CheckpointSpec | None:
    """The suite's `checkpoint` setting: `off` (None), `model`, or {bytes_per_rank, writes, reads}
    (a dict with `mode: model` takes writes and reads for a model checkpoint)."""
    if value is None or value is False or value == "off":
        return None
    if value == "model":
        return CheckpointSpec(mode="model")
    if isinstance(value, Mapping):
        data = dict(value)
        data.setdefault("mode", "size")
        return parse(CheckpointSpec, data, prefix="checkpoint.")
    if isinstance(value, CheckpointSpec):
        return value
    raise ConfigError(f"checkpoint: {value!r} is not one of off, model, {{bytes_per_rank, writes, reads}}")


def _checkpoint_setting(value: Any):
    """The `checkpoint` setting as suite files, the form and `bench sweep --config` give it, checked at
    the edge and kept in its JSON form: "off", "model", or {bytes_per_rank, writes, reads} (`mode`
    added); a bad one names the field and what is allowed."""
    try:
        spec = parse_setting(value)
    except ConfigError as error:
        # "checkpoint.writes: ..." (a field) or "checkpoint.(config): ..." (the whole spec) as "writes: ..."
        message = str(error).removeprefix("checkpoint: ").replace("checkpoint.(config): ", "")
        raise ValueError(message.replace("checkpoint.", "")) from None
    if spec is None:
        return "off"
    return "model" if spec == CheckpointSpec(mode="model") else spec.model_dump(mode="json")


CheckpointSetting = Annotated[
    Any,
    BeforeValidator(_checkpoint_setting),
    WithJsonSchema({"type": ["string", "object"], "description": "off, model, or {bytes_per_rank, writes, reads}"}),
]


# Sized so epoch 1 reads for 5 s or more at the default's largest scale (2 CPU ranks, ~180 images/s).
DEFAULT_DATASET_IMAGES = 1536


class SuiteSettings(Frozen):
    """Every setting a user gives a suite run, with its one default: the DAG's Params are generated from
    these fields, suite files and `bench sweep --config` hold these names, and `to_sweep` is the one
    mapping to the internal SweepConfig. Unknown names are refused (extra="forbid")."""

    workloads: tuple[WorkloadRef, ...] = _ui(
        WORKLOADS,
        S_WHAT,
        "Workloads",
        "Run at every scale: built-in names (`bench workloads list`: ssd, deeplabv3plus trained for real; "
        "emulated accelerators such as retinanet-b200) or absolute paths of workload files. A run's conf "
        f"may list built-ins and the suite's own workload files; any other file is set only in {DEPLOYMENT_PLACES}.",
        unique=True,
        min_length=1,
    )
    gpus: tuple[GpuCount, ...] = _ui(
        (1, 2),
        S_WHAT,
        "GPU counts",
        "Ranks (one per GPU) per scale; the smallest is the scaling baseline.",
        unique=True,
        min_length=1,
    )
    launcher: LauncherKind = _ui(
        "local", S_WHERE, "Launcher", "local: ranks on the worker; ssh: host list; slurm: sbatch."
    )
    conn_id: FormConnId | None = _ui(
        None,
        S_WHERE,
        "SSH connection id",
        "ssh: keys and host keys; slurm: the login node (empty: Slurm CLI on the worker).",
        set_by=SET_BY_DEPLOYMENT,
    )
    hosts: tuple[FormHost, ...] = _ui((), S_WHERE, "SSH hosts", "host[:slots] per entry, for the ssh launcher.")
    ssh_config: FormPath | None = _ui(
        None,
        S_WHERE,
        "SSH config file",
        "ssh (and a Slurm login node): an OpenSSH client config (ssh -F) for the hosts (User, Port, "
        "IdentityFile, UserKnownHostsFile); empty: the user's own ~/.ssh/config. With a connection, its "
        "key and host keys apply on top.",
        set_by=SET_BY_DEPLOYMENT,
    )
    rendezvous_interface: FormInterface | None = _ui(
        None,
        S_WHERE,
        "Rendezvous interface",
        "ssh/slurm: the first rank's host listens on this interface's address (a multi-homed node); "
        "empty: its address on the route to the other hosts (Slurm: its NodeAddr).",
    )
    partition: FormName | None = _ui(None, S_WHERE, "Slurm partition")
    account: FormName | None = _ui(None, S_WHERE, "Slurm account")
    gpus_per_node: int = _ui(0, S_WHERE, "GPUs per node", ge=0, le=16)
    cluster: FormName = _ui(
        "local",
        S_WHERE,
        "Cluster name",
        "History is kept per cluster: runs on different clusters never share a baseline "
        "(default: $SCALEWATCH_CLUSTER, else local).",
    )
    # None (an empty field): every rank on one node. 0 meant the same once and is still taken (see
    # _ranks_per_node); SweepConfig and RunSpec hold None, as history's config keys always have.
    ranks_per_node: int | None = _ui(None, S_WHERE, "Ranks per node (empty: all on one)", ge=0, le=256)
    cpus_per_rank: int = _ui(
        1,
        S_WHERE,
        "CPU cores per rank (nodes without GPUs)",
        "Each rank and its loader threads run on their own cores (GPU nodes: the GPU's NUMA cores).",
        ge=1,
        le=256,
    )
    oversubscribe: bool = _ui(
        False,
        S_WHERE,
        "Allow more ranks than slots",
        "Off: a request above the nodes' slots is refused before launch. On: rows are marked oversubscribed and "
        "never enter history.",
    )
    dataset_path: FormPath | None = _ui(
        None,
        S_DATA,
        "Dataset path on the storage under test",
        "Default: $SCALEWATCH_HOME/data.",
        set_by=SET_BY_DEPLOYMENT,
    )
    storage_cache: FormStorageCache | None = _ui(
        None,
        S_DATA,
        "Storage cache size (optional)",
        "Declared cache of the storage system, e.g. 512GiB: a dataset it could hold is flagged, and its epoch-1 "
        "bandwidth is labelled cache-served, not storage bandwidth.",
    )
    dataset_images: int = _ui(
        DEFAULT_DATASET_IMAGES,
        S_DATA,
        "Images to generate",
        "Synthetic dataset size per workload. The default keeps epoch 1 reading for 5 s or more at 2 CPU ranks; a "
        "shorter epoch-1 read gives no bandwidth figure (bandwidth_note says so).",
        ge=1,
        le=100_000_000,
    )
    evict_dataset: bool = _ui(
        True,
        S_DATA,
        "Evict the dataset before epoch 1",
        "Drop the dataset's pages from each node's page cache before every scale, so epoch 1 reads from storage. "
        "Off: every scale after the first reads a warm cache and its bandwidth is flagged cache-distorted.",
    )
    stage_from: FormPath | None = _ui(
        None,
        S_DATA,
        "Stage from (optional)",
        "Copy an existing dataset instead of generating one.",
        set_by=SET_BY_DEPLOYMENT,
    )
    stage_on: StageOn | None = _ui(
        None,
        S_DATA,
        "Stage on",
        "node: generation, staging and the manifest check run on a compute node through the launcher "
        "(the worker need not mount the store); worker: on the Airflow worker. Empty: node for ssh and "
        "Slurm, worker for local.",
    )
    probe_storage: bool = _ui(
        True,
        S_DATA,
        "Probe the storage's read ceiling (fio)",
        "After the last scale: fio on the compute nodes reads the staged files cold, one node at 1, 2, 4, "
        "... jobs, then 2, 4, ... nodes at once.",
    )
    steps: int = _ui(
        20,
        S_TRAIN,
        "Measured steps (at least)",
        "Steps measured after warm-up; the run goes on until min_measure_s is reached too.",
        ge=1,
        le=10_000_000,
    )
    epochs: int | None = _ui(
        None,
        S_TRAIN,
        "Epochs (optional, replaces steps)",
        "Train whole epochs instead of a step count (epoch 1 is the storage figure).",
        ge=1,
        le=10_000,
    )
    min_measure_s: float = _ui(
        10.0,
        S_TRAIN,
        "Min measured seconds per scale",
        "Warm-up excluded. A scale measured for less is INCONCLUSIVE, never passed.",
        ge=0,
        le=86400,
    )
    batch_size: int = _ui(8, S_TRAIN, "Batch size per rank", ge=1, le=4096)
    image_size: int = _ui(128, S_TRAIN, "Image size", ge=32, le=2048)
    loader: LoaderKind = _ui("dali", S_TRAIN, "Input pipeline")
    preset: Preset = _ui("tiny", S_TRAIN, "Model preset")
    precision: Precision = _ui(
        "fp32",
        S_TRAIN,
        "Precision",
        "Autocast dtype. bf16 on CPUs and GPUs of compute capability 8.0 and up; fp16 runs with a GradScaler and "
        "needs CUDA GPUs (refused before launch on CPU nodes).",
    )
    backend: Backend = _ui(
        "auto",
        S_TRAIN,
        "Data-parallel backend",
        "horovod, or torch DDP (Gloo on CPU, NCCL on GPU); auto: Horovod where it imports, else DDP. The results' "
        "backend column names what ran.",
    )
    compile: CompileMode = _ui(
        "none",
        S_TRAIN,
        "Compile the step",
        "For launch-bound steps (GPU busy well under the step): torch.compile, or its CUDA-graph mode (GPU nodes, "
        "fixed shapes). Compile time is warm-up, never measured.",
    )
    checkpoint: CheckpointSetting = _ui(
        "off",
        S_TRAIN,
        "Checkpoint phase after each scale",
        "off; model: every rank torch.saves its model and optimizer state; or {bytes_per_rank, writes, reads}: "
        "DLIO-shaped shards of that size (1 MiB-1 TiB). Each rank writes its shard (fsync per file), then reads "
        "another rank's back cold; write and read MB/s per scale (slowest rank), files removed after.",
    )
    checkpoint_every_steps: int = _ui(
        0,
        S_TRAIN,
        "Save a checkpoint every N measured steps (0: off)",
        "Each rank saves its model and optimizer state (torch.save, fsync) on the store under test every N measured "
        "steps: ckpt_stall_share is the share of step time the saves took. The saves are kept out of images/s.",
        ge=0,
        le=1_000_000,
    )
    min_scaling_efficiency: Efficiency = _ui(
        DEFAULT_MIN_SCALING_EFFICIENCY,
        S_BOUNDS,
        "Min scaling efficiency",
        "Per scale vs the baseline. 0.7 on the embedded default: ten sweeps on a 2-core CPU machine measured 1->2 "
        "ranks at median 0.76 (SSD) and 0.73 (DeepLabv3+), range 0.58-0.87, under the box's own ~0.8 ceiling "
        "(docs/benchmarks.md). GPU clusters: 0.8-0.9.",
    )
    min_scaling_efficiency_by_gpus: dict[
        Annotated[str, _matching(GPU_COUNT_KEY_RE, "GPU count"), _FormPattern(GPU_COUNT_KEY_RE)],
        Efficiency,
    ] = _ui(
        {},
        S_BOUNDS,
        "Min scaling efficiency per GPU count (optional)",
        'A table {"16": 0.9, "32": 0.8, "64": 0.7}: a scale takes the bound of the smallest listed GPU count at '
        "or above it (the largest beyond); empty: the single bound above for all.",
    )
    max_step_time_spread: float = _ui(
        DEFAULT_MAX_STEP_TIME_SPREAD,
        S_BOUNDS,
        "Max step-time spread",
        "(p90 - p10) / median of a rank's step times; above it a scale is INCONCLUSIVE.",
        ge=0.01,
        le=100,
    )
    min_bandwidth_efficiency: Efficiency = _ui(
        DEFAULT_MIN_BANDWIDTH_EFFICIENCY,
        S_BOUNDS,
        "Min bandwidth efficiency",
        "Per-GPU epoch-1 read rate vs the baseline's, on valid (cold, storage-served) reads only.",
    )
    min_checkpoint_efficiency: Efficiency = _ui(
        DEFAULT_MIN_CHECKPOINT_EFFICIENCY,
        S_BOUNDS,
        "Min checkpoint efficiency",
        "Per-GPU checkpoint write and read MB/s vs the baseline's, against the same ideal as read bandwidth "
        "(judged only where the checkpoint phase ran).",
    )
    min_gpu_util: float | None = _ui(None, S_BOUNDS, "Min GPU utilisation % (empty: not checked)", ge=0, le=100)
    regression_tolerance: float = _ui(
        DEFAULT_REGRESSION_TOLERANCE,
        S_BOUNDS,
        "Regression tolerance",
        "Allowed drop vs the history median.",
        ge=0,
        le=1,
    )
    min_au: float | None = _ui(
        None,
        S_BOUNDS,
        "Min accelerator utilisation, AU (empty: not checked)",
        "Compute time / wall time per rank (MLPerf Storage uses 0.9): fails a scale whose ranks stall on input even "
        "while its throughput scales.",
        ge=0,
        le=1,
    )
    straggler_gap: float = _ui(
        DEFAULT_STRAGGLER_GAP,
        S_BOUNDS,
        "Straggler gap",
        "A rank working more than this fraction below the ranks' median is named.",
        ge=0.01,
        le=1,
    )
    min_supported_gpus: int | None = _ui(
        None,
        S_BOUNDS,
        "Planned GPUs the storage must feed (empty: not checked)",
        "Fails when fio's read ceiling / the largest measured per-GPU epoch-1 read rate gives fewer GPUs than this.",
        ge=1,
        le=1_000_000,
    )
    max_foreign_share: float | None = _ui(
        None,
        S_BOUNDS,
        "Max foreign work on a rank's cores (empty: not checked)",
        "Share of a rank's slot cores that processes not the run's may use while it trains, e.g. 0.25 on dedicated "
        "training nodes: above it the scale fails, naming the process, pid and core. Empty: reported and named as a "
        "cause, not judged (Airflow on the same cores counts).",
        gt=0,
        le=1,
    )
    history_runs: int = _ui(DEFAULT_HISTORY_RUNS, S_BOUNDS, "History runs (K)", ge=1, le=520)
    ideal: Ideal = _ui(
        "auto",
        S_BOUNDS,
        "Ideal the scaling efficiency is judged against",
        "linear: N x one rank (each rank owns an accelerator); independent: the scale's ranks run at once as "
        "independent copies on the same slots (the node's own ceiling: shared cores, memory bandwidth, sibling "
        "threads); auto: linear on GPU nodes, independent on CPU nodes. Both efficiencies are always shown.",
    )
    ceilings: bool = _ui(
        True,
        S_BOUNDS,
        "Measure each scale's node ceiling",
        "After each scale above one rank, its ranks run again at once as independent copies (no collective): "
        "the expected throughput and the independent ideal come from it. One extra run per scale.",
    )
    confirm_causes: bool = _ui(
        True,
        S_BOUNDS,
        "Confirm a failing scale's cause by rerunning it",
        "A scale below its bound and its baseline run again with the dataset cached and with synthetic data (four "
        "extra runs per failing workload): which one removes the drop confirms or corrects the named bottleneck.",
    )
    confirm_regressions: bool = _ui(
        True,
        S_BOUNDS,
        "Confirm a regression by running the scale again",
        "A scale whose images/s (or checkpoint MB/s) falls under its history's regression floor runs once more "
        "after the last scale; a regression is called only when both runs fall under the floor (one extra run per "
        "suspected regression).",
    )
    slack_conn_id: FormConnId | None = _ui(None, S_ALERT, "Slack webhook connection")
    smtp_conn_id: FormConnId | None = _ui(None, S_ALERT, "SMTP connection")
    email_to: tuple[FormEmail, ...] = _ui((), S_ALERT, "E-mail recipients")
    warmup_steps: int = _ui(2, S_ADVANCED, "Warm-up steps (not measured)", ge=0, le=100_000)
    probe_max_jobs: int = _ui(8, S_ADVANCED, "Storage probe: most fio jobs", ge=1, le=256)
    probe_seconds: float = _ui(3.0, S_ADVANCED, "Storage probe: seconds per level", ge=0.5, le=600)
    au_search_max_ranks: int = _ui(
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
    time_limit_s: int = _ui(3600, S_ADVANCED, "Time limit per scale (s)", ge=10, le=14 * 24 * 3600)

    @field_validator("ranks_per_node")
    @classmethod
    def _ranks_per_node(cls, value: int | None) -> int | None:
        return value or None  # 0, the form's old "all on one", is None's spelling

    @field_validator("workloads", "gpus")
    @classmethod
    def _unique(cls, items: tuple) -> tuple:
        return unique_items(items)

    @classmethod
    def defaults(cls) -> dict:
        """Every setting's default as the form and suite files show it (JSON values)."""
        return cls().model_dump(mode="json")

    def sweep_config(self, home: Path | str, output_dir: Path | str) -> SweepConfig:
        """The internal config, with the cross-field rules (hosts' slots, launcher needs) checked."""
        return parse(SweepConfig, self.to_sweep(home, output_dir))

    def to_sweep(self, home: Path | str, output_dir: Path | str) -> dict:
        """SweepConfig fields (validated by the caller with `parse`); `home` places the default dataset."""
        dataset = self.dataset_path or str(Path(home) / "data")
        return {
            "workloads": self.workloads,
            "gpus": self.gpus,
            "launcher": self.launcher,
            "conn_id": self.conn_id,
            "hosts": [HostSlots.parse(h).model_dump() for h in self.hosts],
            "ssh_config": self.ssh_config,
            "rendezvous_interface": self.rendezvous_interface,
            "partition": self.partition,
            "account": self.account,
            "gpus_per_node": self.gpus_per_node,
            "cpus_per_rank": self.cpus_per_rank,
            "oversubscribe": self.oversubscribe,
            "ranks_per_node": self.ranks_per_node,
            "dataset_path": dataset,
            "dataset_images": self.dataset_images,
            "stage_from": self.stage_from,
            "stage_on": self.stage_on,
            "time_limit_s": self.time_limit_s,
            "train": {
                # a template: each scale's launch sets its own workload (bench.suite.plan.run_spec)
                "workload": self.workloads[0] if self.workloads[0] in WORKLOADS else WORKLOADS[0],
                "steps": None if self.epochs else self.steps,
                "epochs": self.epochs,
                "warmup_steps": self.warmup_steps,
                "min_measure_s": self.min_measure_s,
                "loader_threads": self.cpus_per_rank,
                "batch_size": self.batch_size,
                "image_size": self.image_size,
                "loader": self.loader,
                "preset": self.preset,
                "data": dataset,
                "sample_interval_s": SUITE_SAMPLE_INTERVAL_S,
                "drop_caches": self.evict_dataset,
                "precision": self.precision,
                "compile": self.compile,
                "backend": self.backend,
            },
            "thresholds": {
                "min_scaling_efficiency": self.min_scaling_efficiency,
                "max_step_time_spread": self.max_step_time_spread,
                "min_scaling_efficiency_by_gpus": {int(k): v for k, v in self.min_scaling_efficiency_by_gpus.items()},
                "min_bandwidth_efficiency": self.min_bandwidth_efficiency,
                "min_checkpoint_efficiency": self.min_checkpoint_efficiency,
                "min_gpu_util": self.min_gpu_util,
                "regression_tolerance": self.regression_tolerance,
                "history_runs": self.history_runs,
                "min_supported_gpus": self.min_supported_gpus,
                "min_au": self.min_au,
                "straggler_gap": self.straggler_gap,
                "max_foreign_share": self.max_foreign_share,
            },
            "alerts": {
                "slack_conn_id": self.slack_conn_id,
                "smtp_conn_id": self.smtp_conn_id,
                "email_to": self.email_to,
            },
            "output_dir": str(output_dir),
            "cluster": self.cluster,
            "storage_cache_bytes": self.storage_cache,
            "probe_storage": self.probe_storage,
            "probe_max_jobs": self.probe_max_jobs,
            "probe_seconds": self.probe_seconds,
            "au_search_max_ranks": self.au_search_max_ranks,
            "confirm_causes": self.confirm_causes,
            "confirm_regressions": self.confirm_regressions,
            "ceilings": self.ceilings,
            "ideal": self.ideal,
            "checkpoint": self.checkpoint,
            "checkpoint_every_steps": self.checkpoint_every_steps,
        }


LIMITS = ("ge", "gt", "le", "lt")


def limits_of(model: type[BaseModel], name: str) -> dict:
    """The numeric limits (ge, gt, le, lt) of `model`'s field `name`, as Field keywords: what another
    model's field holding the same value takes instead of writing them again."""
    found = {}
    for item in model.model_fields[name].metadata:
        found |= {key: getattr(item, key) for key in LIMITS if getattr(item, key, None) is not None}
    return found


def suite_default(setting: str, **own):
    """A field of another model that holds SuiteSettings' `setting`: its default and its limits are
    written once, there. `own`: Field keywords of this field's own (validate_default; a limit only where
    this model refuses what the settings take, as ranks_per_node's 0, and the test lists each)."""
    return Field(default_of(SuiteSettings, setting), **(limits_of(SuiteSettings, setting) | own))


class TrainConfig(Frozen):
    """One rank's training run; the same object every launcher turns into `bench train` flags.

    A setting the suite also has takes the suite's default (suite_default). Three keep a default of
    their own, for `bench train` run by hand and the tests' single ranks; the suite passes its value
    for each explicitly (SuiteSettings.to_sweep), so a suite run never sees these:
    - steps: None, since a rank is given steps or epochs and a default step count would clash with
      --epochs (the suite's 20 is its own measured-steps floor);
    - image_size: 64, a quick rank on a CPU core (the suite's 128 is the size its history is kept at);
    - min_measure_s: 0, so `bench train --steps N` runs exactly N steps (the suite's 10 s floor is a
      verdict rule: figures measured for less are noise);
    loader_threads (2) is not a suite setting: the suite gives each rank one per core it owns
    (cpus_per_rank), a rank run by hand is not pinned to any.
    """

    # A real model's name, or an emulated workload's (its accelerator_s set)
    workload: Annotated[str, _matching(NAME_RE, "workload")]
    data: SafePath | None = None
    synthetic: bool = False
    preset: Preset = suite_default("preset")
    batch_size: int = suite_default("batch_size")
    image_size: int = Field(64, **limits_of(SuiteSettings, "image_size"))
    warmup_steps: int = suite_default("warmup_steps")
    steps: int | None = Field(None, **limits_of(SuiteSettings, "steps"))
    epochs: int | None = suite_default("epochs")
    loader: LoaderKind = suite_default("loader")
    loader_threads: int = Field(2, ge=1, le=128)
    metrics_out: SafePath | None = None
    seed: int = Field(0, ge=0, le=2**31 - 1)
    lr: float = Field(0.01, gt=0, le=10)
    sample_interval_s: float = Field(1.0, gt=0, le=60)
    # Measured seconds (warm-up excluded) below which a figure is noise: with `steps`, the run goes on
    # past them until this long has been measured too (bounded by MAX_EXTENSION x min_measure_s).
    min_measure_s: float = Field(0.0, **limits_of(SuiteSettings, "min_measure_s"))
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
    checkpoint_dir: SafePath | None = None

    @field_validator("checkpoint", mode="before")
    @classmethod
    def _checkpoint(cls, value) -> CheckpointSpec | None:
        return parse_setting(value)

    run_nonce: Annotated[str, _matching(re.compile(r"^[0-9a-f]{1,64}$"), "run nonce")] | None = None
    # An emulated rank (bench.workloads.emulate): the records reader's real reads, then a timed wait of
    # accelerator_s per batch instead of forward and backward; `accelerator` names the profile.
    accelerator_s: float | None = Field(None, gt=0, le=3600)
    accelerator: Annotated[str, _matching(re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.@-]{0,127})?$"), "accelerator")] = ""
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
    def _checkpoint_needs_a_folder(self) -> TrainConfig:
        if (self.checkpoint is not None or self.checkpoint_every_steps) and self.checkpoint_dir is None:
            raise ValueError("checkpoint_dir: the checkpoint phase and checkpoint_every_steps need a folder")
        return self


class HostSlots(Frozen):
    host: Host
    slots: int = Field(1, ge=1, le=64)
    port: int = Field(22, ge=1, le=65535)
    user: SlurmName | None = None

    @classmethod
    def parse(cls, text: str) -> HostSlots:
        """`host[:slots]`, as horovodrun's -H takes it."""
        host, _, slots = text.partition(":")
        return cls(host=host, slots=int(slots) if slots else 1)


class RunSpec(Frozen):
    """What a launcher needs for one multi-rank run."""

    run_id: RunId
    train: TrainConfig
    ranks: GpuCount
    output_dir: SafePath
    hosts: tuple[HostSlots, ...] = suite_default("hosts")
    # ssh -F for every ssh the suite runs (ssh hosts, the Slurm login node): how the CLI, which has no
    # Airflow connection, reaches the hosts; none: the user's own ssh config.
    ssh_config: SafePath | None = suite_default("ssh_config")
    partition: SlurmName | None = suite_default("partition")
    account: SlurmName | None = suite_default("account")
    gpus_per_node: int = suite_default("gpus_per_node")
    # ge=1: a launcher is given a count or None, never the settings' old 0 ("all on one", None there)
    ranks_per_node: int | None = suite_default("ranks_per_node", ge=1)
    time_limit_s: int = suite_default("time_limit_s")
    cpus_per_rank: int = suite_default("cpus_per_rank")
    oversubscribe: bool = suite_default("oversubscribe")
    env: dict[str, str] = Field(default_factory=dict)
    sbatch_directives: tuple[str, ...] = ()
    rendezvous_addr: Host | None = None  # Slurm: the first node's address to listen on (default its NodeAddr)
    rendezvous_interface: InterfaceName | None = suite_default("rendezvous_interface")  # this interface's address
    python: SafePath | None = None
    nonce: Annotated[str, _matching(re.compile(r"^[0-9a-f]{0,64}$"), "nonce")] = ""

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[HostSlots, ...]) -> tuple[HostSlots, ...]:
        return _unique_hosts(hosts)

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


class Thresholds(Frozen):
    min_scaling_efficiency: float = suite_default("min_scaling_efficiency")
    # Per-scale bounds: a scale takes the bound of the smallest listed GPU count at or above it, and the
    # largest listed one's beyond the table (0.9 up to 16, 0.8 at 32, 0.7 at 64). Empty: one bound for all.
    min_scaling_efficiency_by_gpus: dict[GpuCount, Efficiency] = suite_default("min_scaling_efficiency_by_gpus")
    # A row whose steps vary more than this ((p90 - p10) / median of the worst rank) is INCONCLUSIVE.
    max_step_time_spread: float = suite_default("max_step_time_spread")
    min_bandwidth_efficiency: float = suite_default("min_bandwidth_efficiency")
    # Checkpoint write and read MB/s per GPU vs the baseline's (judged only where the phase ran).
    min_checkpoint_efficiency: float = suite_default("min_checkpoint_efficiency")
    min_gpu_util: float | None = suite_default("min_gpu_util")
    regression_tolerance: float = suite_default("regression_tolerance")
    history_runs: int = suite_default("history_runs")
    # The cluster's planned size: fail when the storage probe and the measured per-GPU demand say the
    # storage feeds fewer GPUs than this (None: sizing is reported, not judged).
    min_supported_gpus: int | None = suite_default("min_supported_gpus")
    # Accelerator utilisation (compute / wall) floor per scale, as MLPerf Storage defines it (it uses
    # 0.9): fails a scale whose ranks stall on input even while its throughput scales. None: not judged.
    min_au: float | None = suite_default("min_au")
    # A rank working more than this fraction below the ranks' median is named as a straggler.
    straggler_gap: float = suite_default("straggler_gap")
    # Foreign work (processes not the run's) above this share of a rank's slot cores fails the scale.
    # None: reported and named as a cause, not judged (a 2-core box running Airflow beside its ranks sees
    # its own scheduler there: 54% of a core in one test run).
    max_foreign_share: float | None = suite_default("max_foreign_share")
    baseline_gpus: GpuCount | None = None

    def scaling_bound(self, gpus: int) -> float:
        """The minimum scaling efficiency that applies at `gpus`."""
        table = self.min_scaling_efficiency_by_gpus
        if not table:
            return self.min_scaling_efficiency
        covering = [n for n in sorted(table) if n >= gpus]
        return table[covering[0] if covering else max(table)]


class AlertTargets(Frozen):
    slack_conn_id: ConnId | None = suite_default("slack_conn_id")
    smtp_conn_id: ConnId | None = suite_default("smtp_conn_id")
    email_to: tuple[Email, ...] = suite_default("email_to")


class SweepConfig(Frozen):
    """One suite run: the DAG's Params and `bench sweep` flags both become this."""

    workloads: tuple[WorkloadRef, ...] = suite_default("workloads")
    gpus: tuple[GpuCount, ...] = suite_default("gpus")
    launcher: LauncherKind = suite_default("launcher")
    conn_id: ConnId | None = suite_default("conn_id")
    hosts: tuple[HostSlots, ...] = suite_default("hosts")
    # ssh -F for every ssh the suite runs (ssh hosts, the Slurm login node): how the CLI, which has no
    # Airflow connection, reaches the hosts; none: the user's own ssh config.
    ssh_config: SafePath | None = suite_default("ssh_config")
    rendezvous_interface: InterfaceName | None = suite_default("rendezvous_interface")
    partition: SlurmName | None = suite_default("partition")
    account: SlurmName | None = suite_default("account")
    gpus_per_node: int = suite_default("gpus_per_node")
    # ge=1: a launcher is given a count or None, never the settings' old 0 ("all on one", None there)
    ranks_per_node: int | None = suite_default("ranks_per_node", ge=1)
    dataset_path: SafePath
    dataset_images: int = suite_default("dataset_images")
    stage_from: SafePath | None = suite_default("stage_from")
    # Where generation, staging and the manifest check run; empty: by launcher (resolved_stage_on).
    stage_on: StageOn | None = suite_default("stage_on")
    generate: bool = True
    train: TrainConfig
    thresholds: Thresholds = Thresholds()
    alerts: AlertTargets = AlertTargets()
    output_dir: SafePath
    cluster: SlurmName = suite_default("cluster")
    time_limit_s: int = suite_default("time_limit_s")
    cpus_per_rank: int = suite_default("cpus_per_rank")
    oversubscribe: bool = suite_default("oversubscribe")
    # Declared cache of the storage system (a NAS's RAM/flash tier): a client cannot drop it, so a
    # dataset it could hold makes epoch-1 bandwidth a cache figure, labelled as such.
    storage_cache_bytes: ByteSize | None = suite_default("storage_cache")
    # fio's cold-read ceiling of the staged dataset, after the last scale (never beside training).
    probe_storage: bool = suite_default("probe_storage")
    probe_max_jobs: int = suite_default("probe_max_jobs")
    probe_seconds: float = suite_default("probe_seconds")
    # An emulated workload's extra rank counts, doubling up to its nodes' slots and this cap (0: none):
    # bench.suite.plan.scales_of; accelerators-at-AU is then measured where AU falls.
    au_search_max_ranks: int = suite_default("au_search_max_ranks")
    # Rerun each scale that fails its scaling bound with a warm cache and with synthetic data, and the
    # baseline likewise (DS-Analyzer's differential), to confirm or correct the named cause. Costs four
    # extra runs per failing workload.
    confirm_causes: bool = suite_default("confirm_causes")
    # Run a scale under its series' regression floor once more, after the last scale; a regression is
    # called only when both runs fall under it (bench.analysis.history.regression).
    confirm_regressions: bool = suite_default("confirm_regressions")
    # Each scale above one rank is followed by its node ceiling: the same ranks as independent copies.
    ceilings: bool = suite_default("ceilings")
    # What a scale's efficiency is judged against: linear (each rank owns an accelerator), independent
    # (the node ceiling: ranks share cores, memory bandwidth, sibling threads), auto (linear on GPU nodes).
    ideal: Ideal = suite_default("ideal")
    # The checkpoint phase after each scale's training, on its ranks (None: off), and the saves during
    # the measured steps (0: none): bench.train.checkpointing.
    checkpoint: CheckpointSpec | None = suite_default("checkpoint", validate_default=True)
    checkpoint_every_steps: int = suite_default("checkpoint_every_steps")

    @field_validator("checkpoint", mode="before")
    @classmethod
    def _checkpoint(cls, value) -> CheckpointSpec | None:
        return parse_setting(value)

    @field_validator("ranks_per_node", mode="before")
    @classmethod
    def _all_on_one(cls, value):
        return value or None  # 0 is SuiteSettings' old spelling of "all on one node"

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[HostSlots, ...]) -> tuple[HostSlots, ...]:
        return _unique_hosts(hosts)

    def resolved_stage_on(self) -> StageOn:
        """stage_on, an empty one resolved by launcher: node for ssh and Slurm (where the store is mounted
        on the compute nodes, perhaps not on the worker), worker for local (the worker is the node)."""
        return self.stage_on or ("worker" if self.launcher == "local" else "node")

    def resolved_ideal(self) -> str:
        """The ideal this suite's verdicts use: `auto` is linear on GPU slots, independent on CPU slots
        (linear too where no node ceiling is measured)."""
        if self.ideal != "auto":
            return self.ideal
        return "linear" if self.gpus_per_node > 0 or not self.ceilings else "independent"

    @field_validator("workloads", "gpus")
    @classmethod
    def _non_empty_unique(cls, items: tuple) -> tuple:
        if not items:
            raise ValueError("must list at least one value")
        return unique_items(items)

    @model_validator(mode="after")
    def _gpu_only_settings(self) -> SweepConfig:
        if self.gpus_per_node == 0 and self.train.precision == "fp16":
            raise ValueError(
                "precision: fp16 needs CUDA GPUs and this suite's nodes have none (gpus_per_node 0); "
                "allowed here: fp32, bf16"
            )
        if self.gpus_per_node == 0 and self.train.compile == "cuda_graphs":
            raise ValueError(
                "compile: cuda_graphs needs CUDA GPUs and this suite's nodes have none (gpus_per_node 0); "
                "allowed here: none, torch_compile"
            )
        return self

    @model_validator(mode="after")
    def _ideal_needs_ceilings(self) -> SweepConfig:
        if self.ideal == "independent" and not self.ceilings:
            raise ValueError("ideal: 'independent' judges each scale against its node ceiling; set ceilings true")
        return self

    @model_validator(mode="after")
    def _launcher_needs(self) -> SweepConfig:
        if self.ssh_config is not None and not (self.launcher == "ssh" or (self.launcher == "slurm" and self.conn_id)):
            raise ValueError(
                f"ssh_config: launcher {self.launcher}{' without conn_id' if self.launcher == 'slurm' else ''} "
                "runs no ssh; allowed with launcher ssh, or slurm with conn_id (its login node)"
            )
        if self.launcher == "ssh" and not self.hosts:
            raise ValueError("hosts: the ssh launcher needs at least one host[:slots]")
        if self.launcher == "ssh":
            capacity = sum(h.slots for h in self.hosts)
            if max(self.gpus) > capacity and not self.oversubscribe:
                raise ValueError(
                    f"gpus: {max(self.gpus)} ranks exceed the {capacity} slots of hosts "
                    f"({', '.join(f'{h.host}:{h.slots}' for h in self.hosts)}); set oversubscribe to allow it"
                )
        return self


def explain(error: ValidationError, prefix: str = "") -> str:
    """One line per invalid field, naming the field: the message users see."""
    lines = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "(config)"
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{prefix}{field}: {message}")
    return "; ".join(lines)


def parse(model: type[Frozen], data: dict, prefix: str = ""):
    """Validate ``data`` into ``model``, raising ConfigError with a field-naming message."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ConfigError(explain(error, prefix)) from None


SETTING_NAMES: tuple[str, ...] = tuple(SuiteSettings.model_fields)


# The embedded default (README command 1, `bench sweep` without --config) differs from a suite in one
# setting: no differential reruns, since on two cores one failing workload's four reruns add about 80 s
# to a four-minute run (docs/benchmarks.md). Suites and the form have them on.
# Its workloads: SSD trained for real (the compute side's scaling) and MLPerf Storage's retinanet on an
# emulated B200 (the storage side: 163 MB/s per accelerator of 323 kB JPEG records, so two ranks put
# this machine's disk at a few hundred MB/s, toward its fio ceiling, where CPU-trained ranks read
# ~1.5 MB/s each). DeepLabv3+ (a second real model, ~70 s here) stays in the suites' default, not in
# the 3-minute README command 1. The emulated workload's rank search stops at 8 ranks: on this 2-core
# machine its slots stop it at 2 anyway, and on a large workstation README command 1 stays a few minutes
# (a suite's own default searches up to 256).
EMBEDDED_DEFAULT: dict = {
    "confirm_causes": False,
    "workloads": ["ssd", "retinanet-b200"],
    "au_search_max_ranks": 8,
}


def environment_defaults(home: Path | str, cluster: str | None) -> dict:
    """The two defaults that come from where the suite runs ($SCALEWATCH_HOME, $SCALEWATCH_CLUSTER)."""
    return {"dataset_path": str(Path(home) / "data"), "cluster": cluster or "local"}


def unknown_settings(keys) -> str | None:
    """The one rule for names a suite run does not know (conf keys, suite files, --config files): a
    message naming each unknown key and the closest known names, or None when every key is known."""
    import difflib

    unknown = [k for k in keys if k not in SuiteSettings.model_fields]
    if not unknown:
        return None
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), SETTING_NAMES, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        parts.append(f"unknown setting {str(key)!r}{hint}")
    return "; ".join(parts) + f" (known settings: {', '.join(SETTING_NAMES)})"


# Settings renamed since suite files and confs were written: old name -> new. The old name still loads
# (renamed_settings), with a deprecation naming both; giving both is an error.
RENAMED_SETTINGS: dict[str, str] = {
    # Thresholds and `bench evaluate --bounds` always called the table this; the suite now does too.
    "scaling_efficiency_by_gpus": "min_scaling_efficiency_by_gpus",
}


def renamed_settings(values: dict, prefix: str = "") -> dict:
    """`values` with each old setting name (RENAMED_SETTINGS) given its new name: a DeprecationWarning
    and a logged warning name both; both names at once raise ConfigError naming both."""
    values = dict(values)
    for old, new in RENAMED_SETTINGS.items():
        if old not in values:
            continue
        if new in values:
            raise ConfigError(
                f"{prefix}{old} and {new} are both given: {old} is the old name of {new}; keep {new} only"
            )
        message = f"{prefix}setting {old!r} is deprecated, renamed {new!r}: rename the key (its value is taken)"
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        logger.warning("%s", message)
        values[new] = values.pop(old)
    return values


def settings_from(values: dict, prefix: str = "") -> SuiteSettings:
    """User-given settings (a conf, a suite file, a --config file) validated once: old names renamed
    (renamed_settings), unknown names refused, then every value; mapping keys become strings, as JSON
    has them. Raises ConfigError naming the field."""
    values = renamed_settings(values, prefix)
    message = unknown_settings(values)
    if message:
        raise ConfigError(prefix + message)
    values = {k: {str(i): v for i, v in val.items()} if isinstance(val, dict) else val for k, val in values.items()}
    return parse(SuiteSettings, values, prefix)


# --- The trust boundary's one rule (see SetBy above) ---


def set_by(name: str) -> SetBy:
    """Who may set SuiteSettings' `name`: a run's conf, or only a suite file and the deployment."""
    extra = SuiteSettings.model_fields[name].json_schema_extra
    return extra.get("set_by", SET_BY_RUN) if isinstance(extra, dict) else SET_BY_RUN


DEPLOYMENT_SETTINGS: tuple[str, ...] = tuple(n for n in SuiteSettings.model_fields if set_by(n) == SET_BY_DEPLOYMENT)
# A run's conf may list built-in workloads; a workload file (an absolute path: its dataset.path and
# profile_file name more files) only where the suite itself lists it.
WORKLOAD_FILES_SETTING = "workloads"


def is_workload_file(ref: object) -> bool:
    return isinstance(ref, str) and ref.startswith("/")


def _same(a: object, b: object) -> bool:
    """Equal as JSON has them (a suite file's tuple and a conf's list are one value)."""
    import json

    def plain(v):
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        if isinstance(v, Mapping):
            return {str(k): plain(x) for k, x in v.items()}
        return str(v) if isinstance(v, Path) else v

    return json.dumps(plain(a), sort_keys=True) == json.dumps(plain(b), sort_keys=True)


def deployment_refusals(conf: Mapping, suite: Mapping) -> list[str]:
    """Each way `conf` (a run's conf, raw: nothing in it has been validated or looked up yet) sets a
    deployment-only setting to other than the suite's value (`suite`: the form's defaults, i.e. the suite
    file's and the deployment's values). The form sends every field, the deployment-only ones with the
    suite's value: giving that same value is not setting it."""
    refusals = []
    for name in DEPLOYMENT_SETTINGS:
        if name in conf and not _same(conf[name], suite.get(name)):
            refusals.append(
                f"{name}: set only in {DEPLOYMENT_PLACES}, not in {RUN_PLACES} "
                f"(this suite's value: {suite.get(name)!r}; leave it out of the conf)"
            )
    refs = conf.get(WORKLOAD_FILES_SETTING)
    if isinstance(refs, list | tuple):
        allowed = {r for r in suite.get(WORKLOAD_FILES_SETTING) or () if is_workload_file(r)}
        files = [r for r in refs if is_workload_file(r) and r not in allowed]
        if files:
            refusals.append(
                f"{WORKLOAD_FILES_SETTING}: workload files ({', '.join(map(repr, files))}) are named only in "
                f"{DEPLOYMENT_PLACES}; a run's conf may list built-ins ({', '.join(BUILTIN_WORKLOADS)}) and "
                f"this suite's own files ({', '.join(sorted(allowed)) or 'none'})"
            )
    return refusals


def refuse_deployment_settings(conf: Mapping, suite: Mapping, prefix: str = "conf: ") -> None:
    """Raise ConfigError naming every deployment-only setting `conf` sets (deployment_refusals). Called on
    the raw conf before any of it is validated: validation itself looks at files (a workload file's
    existence), which a refused conf must not learn about."""
    refusals = deployment_refusals(conf, suite)
    if refusals:
        raise ConfigError(prefix + "; ".join(refusals))
