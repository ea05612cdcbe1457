"""The DAG's typed trigger form (Params), generated from bench.config.SuiteSettings.

Every field, default, bound, pattern, section and description is the settings model's; this module
only turns its JSON schema into Airflow Params. Optional values are ["null", X]: the UI form sends an
empty field as null. The form's JSON schema refuses wrong types and values before a run is created
(UI and REST API alike); SuiteSettings then checks everything again, names included.

The trust boundary (bench.config.SetBy): a deployment-only setting's field allows only the suite's own
value (an enum of one: the form shows it, read-only, and the REST API refuses any other value before a
run exists, its answer naming the field and, in the schema it quotes, `set_only_in`); a workload file
is allowed only where the suite lists it. validate_config refuses such a conf again, with the rule's own
message, for whatever reaches it another way (dag.test, run-once). A conf may set the bounds: the run is
judged by them, but one judged by other bounds than its suite's never enters the shared history
(run_config names them in the run's config).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from airflow.sdk import Param

from bench.config.form import DEPLOYMENT_PLACES
from bench.config.models import SuiteSettings, SweepConfig
from bench.config.settings import RENAMED_SETTINGS, environment_defaults, renamed_settings, settings_from
from bench.config.trust import (
    DEPLOYMENT_SETTINGS,
    WORKLOAD_FILES_SETTING,
    conf_bounds,
    is_workload_file,
    refuse_deployment_settings,
)
from bench.config.types import BUILTIN_WORKLOADS
from scalewatch import paths

logger = logging.getLogger(__name__)


def params(defaults: dict | None = None) -> dict[str, Param]:
    """The form; `defaults` (a suite file's values, already validated) replace the built-in defaults."""
    values = SuiteSettings.defaults() | environment_defaults(paths.home(), os.environ.get("SCALEWATCH_CLUSTER"))
    values |= defaults or {}
    schemas = form_schemas()
    for name in DEPLOYMENT_SETTINGS:  # the suite's value, and only it: shown read-only, any other refused
        schemas[name] = suite_only(schemas[name], values[name])
    files = [r for r in values[WORKLOAD_FILES_SETTING] if is_workload_file(r)]
    workloads = schemas[WORKLOAD_FILES_SETTING]
    workloads["items"] = workloads["items"] | {
        "pattern": workload_pattern(files),
        "files_set_only_in": DEPLOYMENT_PLACES,
    }
    return {name: Param(values[name], **schema) for name, schema in schemas.items()}


def suite_only(schema: dict, value) -> dict:
    """A deployment-only setting's field: the suite's value as its one allowed value (an enum of one: a
    dropdown of one in the UI), saying where it is set. A list (hosts, email_to) also offers only the suite's
    own items (`examples`: the UI's multi-select, its chips the suite's items and nothing to add)."""
    kept = {k: v for k, v in schema.items() if k != "pattern"}
    shown = {"examples": list(value)} if isinstance(value, list | tuple) else {}
    return kept | shown | {"enum": [value], "set_only_in": DEPLOYMENT_PLACES}


def workload_pattern(files: list[str]) -> str:
    """The built-ins' names and this suite's own workload files, as one form pattern. Path characters
    are PATH_RE's; `.` and `+` go in a class, not a backslash (browsers' unicode-mode regexes refuse
    needless escapes such as `\\-`)."""
    literal = [f.replace(".", "[.]").replace("+", "[+]") for f in files]
    builtins = [n for n in BUILTIN_WORKLOADS if re.fullmatch(r"[a-z0-9-]+", n)]
    return "^(?:" + "|".join(builtins + literal) + r")(?![\s\S])"


def form_schemas() -> dict[str, dict]:
    """Each setting's JSON schema as a Param takes it (pydantic's, with Optional as a type list)."""
    props = SuiteSettings.form_properties()
    return {name: _param_schema(schema) for name, schema in props.items()}


def _param_schema(schema: dict) -> dict:
    schema = {k: v for k, v in schema.items() if k not in ("default", "set_by")}
    if "anyOf" in schema:  # X | None -> {X, type: [null, X.type]}
        options = schema.pop("anyOf")
        (inner,) = [o for o in options if o.get("type") != "null"]
        schema |= {k: v for k, v in inner.items() if k != "type"} | {"type": ["null", inner["type"]]}
        if "enum" in schema:  # a choice that may be left empty (stage_on: resolved by launcher)
            schema["enum"] = [None, *schema["enum"]]
    if "patternProperties" in schema:  # a table keyed by GPU count: the key pattern and the value schema
        ((pattern, value),) = schema.pop("patternProperties").items()
        schema |= {"propertyNames": {"pattern": pattern}, "additionalProperties": value}
    return schema


def settings_from_params(values: dict, conf: dict | None = None) -> SuiteSettings:
    """A run's settings, the suite's form values (`values`: the DAG's Param defaults) merged with its conf,
    as the typed settings; raises ConfigError. A conf that sets a deployment-only setting is refused
    first, before any of it is validated (bench.config.refuse_deployment_settings). An old setting name in
    the conf is renamed there (both names in the conf: an error naming both); Airflow copies unknown conf
    keys into the Params too, so the old name is dropped from those."""
    conf = renamed_settings(conf or {}, "conf: ")
    refuse_deployment_settings(conf, values)
    return settings_from({k: v for k, v in values.items() if k not in RENAMED_SETTINGS} | conf)


def run_config(values: dict, conf: dict | None, home: Path | str, output_dir: Path | str) -> SweepConfig:
    """A run's config from its suite's values (`values`: the DAG's Param defaults) and its conf: the settings
    (settings_from_params), with the bounds settings the conf set to other than the suite's named
    (conf_bounds): the run is judged by them and kept out of the shared history (bench.suite.record)."""
    settings = settings_from_params(values, conf)
    own = conf_bounds(settings, values)
    if own:
        logger.warning(
            "this run's conf sets %s to other than the suite's: it is judged by them and kept out of the history "
            "other runs are judged against",
            ", ".join(own),
        )
    return settings.sweep_config(home, output_dir, conf_bounds=own)


def form_values(dag) -> dict:
    """The DAG's Param defaults: its suite file's and the deployment's values, never a run's conf."""
    return {name: dag.params.get_param(name).value for name in dag.params}


def check_suite_values(name: str, defaults: dict) -> None:
    """A suite file's values, validated as the settings they are (unknown names refused, naming the
    closest known ones). Mapping keys become strings, as the form's JSON has them."""
    for key, value in defaults.items():
        if isinstance(value, dict):
            defaults[key] = {str(k): v for k, v in value.items()}
    from bench.workloads.spec import check_refs

    check_refs(settings_from(defaults).sweep_config(paths.home(), paths.output_dir()).training.workloads)
