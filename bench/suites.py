"""Suite files: one YAML file per cluster or storage system, each becoming its own DAG.

A suite file holds the trigger form's fields (the DAG's Params) as that suite's defaults, plus its
`schedule` and `description`. It is validated twice at load time, with the same typed config as
everything else: each value against its Param's JSON schema, then the whole as a SweepConfig, so a
bad value is an error naming the file and the field before any DAG is built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import ConfigError

SUITE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
SUITE_KEYS = ("schedule", "description")  # suite-level keys; every other key is a Param of the form
MAX_SUITE_FILE_BYTES = 256 << 10


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    schedule: str | None
    description: str
    defaults: dict = field(default_factory=dict)  # Param name -> value


def dag_id(name: str) -> str:
    return f"scaling_regression__{name}"


def load_suites(folder: Path, check) -> tuple[list[Suite], dict[Path, str]]:
    """Every `*.yaml` / `*.yml` in folder: (valid suites, {file: error}); one bad file never hides the rest.

    `check(name, defaults)` validates the Param values (raising ConfigError naming the field); the DAG
    side passes the form's own schema check and its mapping to SweepConfig.
    """
    suites, errors = [], {}
    if not folder.is_dir():
        return suites, errors
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            suites.append(load_suite(path, check))
        except ConfigError as error:
            errors[path] = str(error)
    return suites, errors


def load_suite(path: Path, check) -> Suite:
    import yaml

    name = path.stem
    if not SUITE_NAME_RE.fullmatch(name):
        raise ConfigError(f"{path}: file name {name!r} must match {SUITE_NAME_RE.pattern} (it names the DAG)")
    if path.stat().st_size > MAX_SUITE_FILE_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_SUITE_FILE_BYTES} bytes")
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML ({error})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: must be a mapping of field: value")
    schedule = doc.pop("schedule", None)
    if schedule is not None and not isinstance(schedule, str):
        raise ConfigError(f"{path}: schedule: must be a cron string or null, got {schedule!r}")
    if isinstance(schedule, str) and schedule.strip().lower() in ("", "none"):
        schedule = None
    if schedule is not None:
        _check_cron(path, schedule)
    description = doc.pop("description", "") or ""
    if not isinstance(description, str):
        raise ConfigError(f"{path}: description: must be text")
    defaults = {str(k): v for k, v in doc.items()}
    try:
        check(name, defaults)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    return Suite(name, path, schedule, description, defaults)


def _check_cron(path: Path, schedule: str) -> None:
    from croniter import croniter

    if not croniter.is_valid(schedule):
        raise ConfigError(f"{path}: schedule: {schedule!r} is not a valid cron expression")
