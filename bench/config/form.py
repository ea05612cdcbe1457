"""The trigger form's side of a setting: its section, title and pattern, and who may set it (`set_by`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainSerializer,
    WithJsonSchema,
)

from bench.config.types import (
    BUCKET_RE,
    CONN_ID_RE,
    EMAIL_RE,
    INTERFACE_RE,
    NAME_RE,
    PATH_RE,
    PREFIX_RE,
    S3_SCHEME,
    GpuCount,
    HostSlots,
    S3Url,
    matching,
    safe_path,
)

# --- The suite's settings: the one definition behind the Airflow form, suite files and `bench sweep` ---


# A form pattern must refuse what fullmatch refuses: JSON schema validators search with `$`, which in
# Python also matches before a trailing newline; `(?![\s\S])` is "end of text" in Python and ECMA alike.
def form_pattern(regex: re.Pattern[str] | str) -> str:
    text = regex.pattern if isinstance(regex, re.Pattern) else regex
    return "^(?:" + text.removeprefix("^").removesuffix("$") + r")(?![\s\S])"


class FormPattern:
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


def _host_slots(value):
    """A `host[:slots]` string (the form's, a suite file's, the model's own JSON) as a HostSlots; a HostSlots
    as is. Nothing else: a host is written one way wherever a user writes it."""
    if isinstance(value, HostSlots):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected host[:slots] (a string), got {value!r}")
    if not HOST_SLOTS_RE.fullmatch(value):
        raise ValueError(f"host[:slots] {value!r} does not match {HOST_SLOTS_RE.pattern}")
    host, _, slots = value.partition(":")
    return {"host": host, "slots": int(slots) if slots else 1}


# A node and its slots: a HostSlots in the model (what the launchers take), `host[:slots]` in JSON and the
# form. Port and user are not settings (the ssh config or the connection gives them): never written.
FormHost = Annotated[
    HostSlots,
    BeforeValidator(_host_slots),
    PlainSerializer(HostSlots.text),
    WithJsonSchema({"pattern": form_pattern(HOST_SLOTS_RE), "type": "string"}),
]
FormName = Annotated[str, matching(NAME_RE, "name"), FormPattern(NAME_RE)]
FormInterface = Annotated[str, matching(INTERFACE_RE, "interface name"), FormPattern(INTERFACE_RE)]
FormConnId = Annotated[str, matching(CONN_ID_RE, "connection id"), FormPattern(CONN_ID_RE)]
# A path: a Path in the model, a string in JSON and the form
FormPath = Annotated[
    Path, AfterValidator(safe_path), WithJsonSchema({"pattern": form_pattern(PATH_RE), "type": "string"})
]
# Where a dataset lives: an s3://BUCKET/PREFIX string (tried first) or a path; one string in the form
_S3_URL = f"{S3_SCHEME}{BUCKET_RE.pattern[1:-1]}(?:/{PREFIX_RE.pattern[1:-1]})?"
FORM_DATASET_RE = re.compile(f"^(?:{_S3_URL}|{PATH_RE.pattern[1:-1]})$")
FormDatasetPath = Annotated[
    S3Url | FormPath, WithJsonSchema({"pattern": form_pattern(FORM_DATASET_RE), "type": "string"})
]
FormEmail = Annotated[str, matching(EMAIL_RE, "e-mail address"), FormPattern(EMAIL_RE)]
FormStorageCache = Annotated[str, matching(STORAGE_CACHE_RE, "storage cache size"), FormPattern(STORAGE_CACHE_RE)]
# A per-GPU-count table's key: a GPU count in the model (the verdict compares it with a scale's), a string
# of digits in JSON and the form (object keys are strings there).
GpuCountKey = Annotated[GpuCount, WithJsonSchema({"type": "string", "pattern": form_pattern(GPU_COUNT_KEY_RE)})]

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
# (issue 48). So is one that decides where commands start (launcher, hosts, rendezvous_interface), whose
# history a run joins and reads (cluster), or who is told of its verdict (the alert targets: a conf's null
# silenced them, its list sent the report anywhere; issue 61). Such a setting is set by a suite file or the
# deployment (the embedded default's environment, Airflow connections); a conf that gives it another value
# is refused before anything runs (refuse_deployment_settings), and the form shows the suite's value,
# read-only (scalewatch.params). A conf's own bounds are taken, but keep its run out of the shared history
# (bench.config.trust.conf_bounds).
SetBy = Literal["run", "deployment"]
SET_BY_RUN: SetBy = "run"
SET_BY_DEPLOYMENT: SetBy = "deployment"
RUN_PLACES = "a run's conf (the trigger form, the REST API, scripts/run-once.sh)"
DEPLOYMENT_PLACES = "a suite file ($SCALEWATCH_SUITES) or the deployment (the environment, Airflow connections)"


def form_field(
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
