"""Typed, validated configuration: every user input passes through these models once.

Airflow Params, CLI flags and config files are all turned into these models at the edge, then the
models are passed down; nothing deeper re-reads the environment or re-validates strings.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from bench.errors import ConfigError

Workload = Literal["ssd", "deeplabv3plus"]
WORKLOADS: tuple[str, ...] = ("ssd", "deeplabv3plus")
LoaderKind = Literal["dali", "torch"]
Preset = Literal["tiny", "small", "production"]
LauncherKind = Literal["local", "ssh", "slurm"]
Backend = Literal["horovod", "ddp", "auto"]
BACKENDS: tuple[str, ...] = ("horovod", "ddp", "auto")
Bind = Literal["auto", "none"]
LAUNCHERS: tuple[str, ...] = ("local", "ssh", "slurm")

# Strict patterns: values that end up on a remote command line must match these, and are shlex-quoted
# as well. A value that does not match is refused before anything runs.
HOST_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
PATH_RE = re.compile(r"^/[A-Za-z0-9._/+@,=-]*$")
ENV_KEY_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")
ENV_VALUE_RE = re.compile(r"^[A-Za-z0-9._/:,=@+-]{0,256}$")
SBATCH_DIRECTIVE_RE = re.compile(r"^--[a-z][a-z-]{1,40}(=[A-Za-z0-9._:,/@+-]{1,128})?$")
CONN_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,199}$")
EMAIL_RE = re.compile(r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}$")


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
SlurmName = Annotated[str, _matching(NAME_RE, "name")]
SafePath = Annotated[Path, AfterValidator(_safe_path)]
ConnId = Annotated[str, _matching(CONN_ID_RE, "connection id")]
RunId = Annotated[str, _matching(RUN_ID_RE, "run id")]
Email = Annotated[str, _matching(EMAIL_RE, "e-mail address")]


# A per-rank input batch above this cannot train on any current accelerator (its activations are many
# times larger); a form value such as batch_size=4096 at image_size=2048 (192 GiB) is refused at the edge.
MAX_INPUT_BATCH_BYTES = 8 * 2**30


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TrainConfig(Frozen):
    """One rank's training run; the same object every launcher turns into `bench train` flags."""

    workload: Workload
    data: SafePath | None = None
    synthetic: bool = False
    preset: Preset = "tiny"
    batch_size: int = Field(8, ge=1, le=4096)
    image_size: int = Field(64, ge=32, le=2048)
    warmup_steps: int = Field(2, ge=0, le=100_000)
    steps: int | None = Field(None, ge=1, le=10_000_000)
    epochs: int | None = Field(None, ge=1, le=10_000)
    loader: LoaderKind = "dali"
    loader_threads: int = Field(2, ge=1, le=128)
    metrics_out: SafePath | None = None
    seed: int = Field(0, ge=0, le=2**31 - 1)
    lr: float = Field(0.01, gt=0, le=10)
    sample_interval_s: float = Field(1.0, gt=0, le=60)
    # Measured seconds (warm-up excluded) below which a figure is noise: with `steps`, the run goes on
    # past them until this long has been measured too (bounded by MAX_EXTENSION x min_measure_s).
    min_measure_s: float = Field(0.0, ge=0, le=24 * 3600)
    sampler: bool = True
    # Evict the dataset's own pages before epoch 1: without it every scale after the first reads a warm
    # cache and no epoch-1 figure is a storage figure.
    drop_caches: bool = True
    # Read every dataset file once before epoch 1 (one rank per node): the differential rerun that takes
    # storage out of a failing scale (DS-Analyzer's warm-cache run). Its bytes are the page cache's.
    warm_cache: bool = False
    amp: bool = False
    # Horovod or torch DDP; auto: Horovod where it imports, else DDP (the summary's `backend` names what ran).
    backend: Backend = "auto"
    # auto: ranks started unpinned by an outside launcher (horovodrun, torchrun, srun) split their
    # node's allowed cores by local rank themselves; none: they run where they were started.
    bind: Bind = "none"
    run_nonce: Annotated[str, _matching(re.compile(r"^[0-9a-f]{1,64}$"), "run nonce")] | None = None

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

    def to_argv(self) -> list[str]:
        """Flags for `bench train`; values are already validated, callers still quote them."""
        argv = ["--workload", self.workload, "--preset", self.preset]
        argv += ["--batch-size", str(self.batch_size), "--image-size", str(self.image_size)]
        argv += ["--warmup-steps", str(self.warmup_steps), "--seed", str(self.seed)]
        argv += ["--loader", self.loader, "--loader-threads", str(self.loader_threads)]
        argv += ["--lr", repr(self.lr), "--sample-interval", repr(self.sample_interval_s)]
        if self.min_measure_s:
            argv += ["--min-measure-s", repr(self.min_measure_s)]
        if self.steps is not None:
            argv += ["--steps", str(self.steps)]
        if self.epochs is not None:
            argv += ["--epochs", str(self.epochs)]
        if self.synthetic:
            argv.append("--synthetic")
        if self.data is not None:
            argv += ["--data", str(self.data)]
        if self.metrics_out is not None:
            argv += ["--metrics-out", str(self.metrics_out)]
        if not self.sampler:
            argv.append("--no-sampler")
        argv.append("--drop-caches" if self.drop_caches else "--no-drop-caches")
        if self.warm_cache:
            argv.append("--warm-cache")
        if self.amp:
            argv.append("--amp")
        argv += ["--backend", self.backend, "--bind", self.bind]
        if self.run_nonce:
            argv += ["--run-nonce", self.run_nonce]
        return argv


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
    ranks: int = Field(ge=1, le=4096)
    output_dir: SafePath
    hosts: tuple[HostSlots, ...] = ()
    partition: SlurmName | None = None
    account: SlurmName | None = None
    gpus_per_node: int = Field(0, ge=0, le=16)
    ranks_per_node: int | None = Field(None, ge=1, le=256)
    time_limit_s: int = Field(3600, ge=10, le=14 * 24 * 3600)
    cpus_per_rank: int = Field(1, ge=1, le=256)
    oversubscribe: bool = False
    env: dict[str, str] = Field(default_factory=dict)
    sbatch_directives: tuple[str, ...] = ()
    rendezvous_addr: Host | None = None
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
    min_scaling_efficiency: float = Field(0.8, ge=0, le=1.5)
    # Per-scale bounds: a scale takes the bound of the smallest listed GPU count at or above it, and the
    # largest listed one's beyond the table (0.9 up to 16, 0.8 at 32, 0.7 at 64). Empty: one bound for all.
    min_scaling_efficiency_by_gpus: dict[
        Annotated[int, Field(ge=1, le=4096)], Annotated[float, Field(ge=0, le=1.5)]
    ] = Field(default_factory=dict)
    # A row whose steps vary more than this ((p90 - p10) / median of the worst rank) is INCONCLUSIVE.
    max_step_time_spread: float = Field(1.0, gt=0, le=100)
    min_bandwidth_efficiency: float = Field(0.7, ge=0, le=1.5)
    min_gpu_util: float | None = Field(None, ge=0, le=100)
    regression_tolerance: float = Field(0.1, ge=0, le=1)
    history_runs: int = Field(8, ge=1, le=520)
    # The cluster's planned size: fail when the storage probe and the measured per-GPU demand say the
    # storage feeds fewer GPUs than this (None: sizing is reported, not judged).
    min_supported_gpus: int | None = Field(None, ge=1, le=1_000_000)
    # Accelerator utilisation (compute / wall) floor per scale, as MLPerf Storage defines it (it uses
    # 0.9): fails a scale whose ranks stall on input even while its throughput scales. None: not judged.
    min_au: float | None = Field(None, ge=0, le=1)
    # A rank working more than this fraction below the ranks' median is named as a straggler.
    straggler_gap: float = Field(0.10, gt=0, le=1)
    baseline_gpus: int | None = Field(None, ge=1, le=4096)

    def scaling_bound(self, gpus: int) -> float:
        """The minimum scaling efficiency that applies at `gpus`."""
        table = self.min_scaling_efficiency_by_gpus
        if not table:
            return self.min_scaling_efficiency
        covering = [n for n in sorted(table) if n >= gpus]
        return table[covering[0] if covering else max(table)]


class AlertTargets(Frozen):
    slack_conn_id: ConnId | None = None
    smtp_conn_id: ConnId | None = None
    email_to: tuple[Email, ...] = ()


class SweepConfig(Frozen):
    """One suite run: the DAG's Params and `bench sweep` flags both become this."""

    workloads: tuple[Workload, ...] = ("ssd", "deeplabv3plus")
    gpus: tuple[Annotated[int, Field(ge=1, le=4096)], ...] = (1, 2)
    launcher: LauncherKind = "local"
    conn_id: ConnId | None = None
    hosts: tuple[HostSlots, ...] = ()
    partition: SlurmName | None = None
    account: SlurmName | None = None
    gpus_per_node: int = Field(0, ge=0, le=16)
    ranks_per_node: int | None = Field(None, ge=1, le=256)
    dataset_path: SafePath
    dataset_images: int = Field(1536, ge=1, le=100_000_000)
    stage_from: SafePath | None = None
    generate: bool = True
    train: TrainConfig
    thresholds: Thresholds = Thresholds()
    alerts: AlertTargets = AlertTargets()
    output_dir: SafePath
    cluster: SlurmName = "local"
    time_limit_s: int = Field(3600, ge=10, le=14 * 24 * 3600)
    cpus_per_rank: int = Field(1, ge=1, le=256)
    oversubscribe: bool = False
    # Declared cache of the storage system (a NAS's RAM/flash tier): a client cannot drop it, so a
    # dataset it could hold makes epoch-1 bandwidth a cache figure, labelled as such.
    storage_cache_bytes: ByteSize | None = None
    # fio's cold-read ceiling of the staged dataset, after the last scale (never beside training).
    probe_storage: bool = True
    probe_max_jobs: int = Field(8, ge=1, le=256)
    probe_seconds: float = Field(3.0, ge=0.5, le=600)
    # Rerun each scale that fails its scaling bound with a warm cache and with synthetic data, and the
    # baseline likewise (DS-Analyzer's differential), to confirm or correct the named cause. Costs four
    # extra runs per failing workload.
    confirm_causes: bool = True

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[HostSlots, ...]) -> tuple[HostSlots, ...]:
        return _unique_hosts(hosts)

    @field_validator("workloads", "gpus")
    @classmethod
    def _non_empty_unique(cls, items: tuple) -> tuple:
        if not items:
            raise ValueError("must list at least one value")
        if len(set(items)) != len(items):
            raise ValueError(f"values must be unique, got {list(items)}")
        return items

    @model_validator(mode="after")
    def _launcher_needs(self) -> SweepConfig:
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
