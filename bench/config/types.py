"""The value types every model shares: the choices (Literals), the strict patterns for what reaches a
remote command line, the constrained types, `Frozen`, and `parse`/`explain` (a ValidationError as the
one message a user sees, naming the field).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Annotated, Literal, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
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
BUILTIN_WORKLOADS_DIR = Path(__file__).resolve().parents[1] / "workloads" / "builtin"
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
PoolBy = Literal["cluster"]  # `bench detect --pool`: the series pooled together (issue 63)

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


def unique_hosts(hosts: tuple) -> tuple:
    """Two entries for one host would give two ranks the same local rank (the same GPU and cores)."""
    seen: set[str] = set()
    for h in hosts:
        if h.host in seen:
            raise ValueError(f"host {h.host} is listed twice; give it once with its total slots ({h.host}:N)")
        seen.add(h.host)
    return hosts


def matching(pattern: re.Pattern[str], what: str):
    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{what} {value!r} does not match {pattern.pattern}")
        return value

    return AfterValidator(check)


def safe_path(value: Path) -> Path:
    text = str(value)
    if not PATH_RE.fullmatch(text) or "/../" in text + "/" or text.endswith("/.."):
        raise ValueError(
            f"path {text!r} must be absolute and use only letters, digits and ._/+@,=- "
            "(no spaces, no '..', no shell metacharacters)"
        )
    return value


Host = Annotated[str, matching(HOST_RE, "host")]


def workload_ref(value: str) -> str:
    """A built-in workload's name, or the absolute path of a workload file (.yaml): the file's content is
    validated where the suite is planned (bench.workloads.spec.load), its name and existence here."""
    if value.startswith("/"):
        safe_path(Path(value))
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
    AfterValidator(workload_ref),
    WithJsonSchema({"type": "string", "pattern": WORKLOAD_REF_PATTERN}),
]
# Linux interface names: up to 15 characters, no '/', no white space (IFNAMSIZ); ours are a safe subset
INTERFACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}$")
InterfaceName = Annotated[str, matching(INTERFACE_RE, "interface name")]
SlurmName = Annotated[str, matching(NAME_RE, "name")]
SafePath = Annotated[Path, AfterValidator(safe_path)]
ConnId = Annotated[str, matching(CONN_ID_RE, "connection id")]

# A dataset in a bucket (issue 64): `s3://BUCKET/PREFIX`. S3's bucket rules as RGW applies them (3-63
# lower-case letters, digits, dots, hyphens); a prefix holds the characters a dataset folder may (no `..`).
# bench.data.location decides the storage kind from it and reads the endpoint and keys from the deployment.
S3_SCHEME = "s3://"
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
PREFIX_RE = re.compile(r"^[A-Za-z0-9._/+@,=-]*$")


def split_s3_url(text: str) -> tuple[str, str]:
    """(bucket, prefix without leading or trailing '/') of s3://BUCKET/PREFIX (also the `s3:/` a Path
    collapses it to); a ValueError naming `dataset_path` and the rule otherwise."""
    rest = text[len(S3_SCHEME) :] if text.startswith(S3_SCHEME) else text[len("s3:/") :]
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    if not BUCKET_RE.match(bucket):
        raise ValueError(
            f"dataset_path: bucket {bucket!r} is not a valid S3 bucket name "
            "(3-63 characters: lower-case letters, digits, '.', '-'; s3://BUCKET/PREFIX)"
        )
    if not PREFIX_RE.match(prefix) or ".." in prefix.split("/") or "//" in prefix:
        raise ValueError(
            f"dataset_path: prefix {prefix!r} may hold only letters, digits and ._/+@,=- "
            "(no '..' and no empty folder names)"
        )
    return bucket, prefix


def _s3_url(value: str) -> str:
    if not value.startswith(S3_SCHEME):
        raise ValueError(f"{value!r} is not an s3://BUCKET/PREFIX location")
    split_s3_url(value)
    return value.rstrip("/")


# A settings field that may name a bucket: `S3Url | SafePath` (an s3:// string is tried first; anything
# else is a path, checked as ever).
S3Url = Annotated[str, AfterValidator(_s3_url)]
RunId = Annotated[str, matching(RUN_ID_RE, "run id")]
Email = Annotated[str, matching(EMAIL_RE, "e-mail address")]


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


class HostSlots(Frozen):
    """One node and its slots (ranks it takes), as a launcher holds it; the `where` group's `hosts` hold
    these, written `host[:slots]` in the form and suite files. Port and user are the ssh config's or the
    connection's (bench.launch.sshopts), never a host entry's."""

    host: Host
    slots: int = Field(1, ge=1, le=64)

    def text(self) -> str:
        """`host[:slots]` again (`:slots` left out at one slot, as the form shows it)."""
        return self.host if self.slots == 1 else f"{self.host}:{self.slots}"


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


def explain(error: ValidationError, prefix: str = "", groups: tuple[str, ...] = ()) -> str:
    """One line per invalid field, naming the field: the message users see. `groups`: the names of the
    model's nested groups, left out of a field's path (the user wrote the setting by its own name)."""
    lines = []
    for item in error.errors():
        loc = item["loc"][1:] if item["loc"] and item["loc"][0] in groups and len(item["loc"]) > 1 else item["loc"]
        field = ".".join(str(p) for p in loc) or "(config)"
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{prefix}{field}: {message}")
    return "; ".join(lines)


def parse(model: type[Frozen], data: dict, prefix: str = "", groups: tuple[str, ...] = ()):
    """Validate ``data`` into ``model``, raising ConfigError with a field-naming message (`groups`: as in
    explain, for a model whose fields a user writes by their flat names)."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ConfigError(explain(error, prefix, groups)) from None
