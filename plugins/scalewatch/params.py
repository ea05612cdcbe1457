"""The DAG's typed trigger form (Params), generated from bench.config.SuiteSettings.

Every field, default, bound, pattern, section and description is the settings model's; this module
only turns its JSON schema into Airflow Params. Optional values are ["null", X]: the UI form sends an
empty field as null. The form's JSON schema refuses wrong types and values before a run is created
(UI and REST API alike); SuiteSettings then checks everything again, names included.
"""

from __future__ import annotations

import os

from airflow.sdk import Param

from bench.config import RENAMED_SETTINGS, SuiteSettings, environment_defaults, renamed_settings, settings_from
from scalewatch import paths


def params(defaults: dict | None = None) -> dict[str, Param]:
    """The form; `defaults` (a suite file's values, already validated) replace the built-in defaults."""
    values = SuiteSettings.defaults() | environment_defaults(paths.home(), os.environ.get("SCALEWATCH_CLUSTER"))
    values |= defaults or {}
    return {name: Param(values[name], **schema) for name, schema in form_schemas().items()}


def form_schemas() -> dict[str, dict]:
    """Each setting's JSON schema as a Param takes it (pydantic's, with Optional as a type list)."""
    props = SuiteSettings.model_json_schema()["properties"]
    return {name: _param_schema(schema) for name, schema in props.items()}


def _param_schema(schema: dict) -> dict:
    schema = {k: v for k, v in schema.items() if k != "default"}
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
    """A run's Params (form defaults merged with its conf) as the typed settings; raises ConfigError.
    An old setting name in the conf is renamed there (both names in the conf: an error naming both);
    Airflow copies unknown conf keys into the Params too, so the old name is dropped from those."""
    conf = renamed_settings(conf or {}, "conf: ")
    return settings_from({k: v for k, v in values.items() if k not in RENAMED_SETTINGS} | conf)


def check_suite_values(name: str, defaults: dict) -> None:
    """A suite file's values, validated as the settings they are (unknown names refused, naming the
    closest known ones). Mapping keys become strings, as the form's JSON has them."""
    for key, value in defaults.items():
        if isinstance(value, dict):
            defaults[key] = {str(k): v for k, v in value.items()}
    from bench.workloads.spec import check_refs

    check_refs(settings_from(defaults).sweep_config(paths.home(), paths.output_dir()).workloads)
