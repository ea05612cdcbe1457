"""The edge: a run's Params validated once, by the first task, into the plan every other task reads.

The plan is one XCom (`validate_config`'s, with `sweep`, `matrix` and `suite_run_id` as its keys): `sweep`
is the typed `SweepConfig` dumped once as JSON. Downstream tasks get the typed config back with
`sweep_config(plan)`, which decodes that dump and runs no validator and applies no default: what a task
works on is what the edge checked, never a second reading of the user's settings (a second validation
could disagree with the first, e.g. TrainConfig's amp/precision rule reads which fields were given).
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Annotated, Literal, TypeVar, Union, get_args, get_origin

from airflow.sdk import task
from pydantic import BaseModel

from bench.config import SweepConfig

M = TypeVar("M", bound=BaseModel)


@task
def validate_config(**context) -> dict:
    """The run's Params as the typed settings, before anything is staged or launched: a conf key
    the suite does not know (a typo, a stale key) fails here, naming it and the closest names."""
    from airflow.sdk.exceptions import AirflowFailException

    from bench.errors import ConfigError
    from bench.suite.plan import run_matrix, suite_run_identity
    from bench.workloads.spec import check_refs
    from scalewatch import paths
    from scalewatch.params import form_values, settings_from_params

    dag_run = context.get("dag_run")
    conf = dict(getattr(dag_run, "conf", None) or {})
    try:
        # the suite's values (the DAG's defaults), not the run's Params: those already hold the conf, and a
        # deployment-only setting the conf changed would look like the suite's own
        settings = settings_from_params(form_values(context["dag"]), conf)
        cfg = settings.sweep_config(paths.home(), paths.output_dir())
        check_refs(cfg.workloads)  # each workload file's content, before anything runs
    except ConfigError as error:
        raise AirflowFailException(f"invalid params: {error}") from None
    return {
        "sweep": cfg.model_dump(mode="json"),
        "matrix": run_matrix(cfg),
        # the suite's identity holds its DAG: two suites on one schedule share Airflow's run_id
        "suite_run_id": suite_run_identity(context["dag"].dag_id, context["run_id"]),
    }


@task
def matrix(plan: dict) -> list[dict]:
    """The scales to train, one mapped `train` task each."""
    return plan["matrix"]


def sweep_config(plan: dict) -> SweepConfig:
    """The config `validate_config` checked, typed again for bench's functions (which take a SweepConfig)."""
    return from_validated(SweepConfig, plan["sweep"])


def from_validated(model: type[M], data: dict) -> M:
    """`data`, the `model_dump(mode="json")` of a `model` that validated, as that model again: each field
    is decoded from its JSON form by its annotation (nested models, tuples, int-keyed tables, paths) and
    set with `model_construct`. No validator runs and no default is filled in: a field the dump lacks
    (or one the model does not have) is an error, since the edge dumps every field."""
    fields = model.model_fields
    if data.keys() != fields.keys():
        missing, unknown = sorted(fields.keys() - data.keys()), sorted(data.keys() - fields.keys())
        raise ValueError(f"{model.__name__}: not a validated dump (missing {missing}, unknown {unknown})")
    return model.model_construct(**{name: _decoded(field.annotation, data[name]) for name, field in fields.items()})


def _decoded(annotation, value):
    """One JSON value as the Python type its annotation names (no constraint is checked)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if value is None or origin is Literal:
        return value
    if origin is Annotated:
        return _decoded(args[0], value)
    if origin in (Union, types.UnionType):
        (arm,) = [a for a in args if a is not type(None)]  # the config's unions are all `X | None`
        return _decoded(arm, value)
    if origin is tuple:  # tuple[X, ...]
        return tuple(_decoded(args[0], v) for v in value)
    if origin is dict:  # JSON keys are strings: an int-keyed table gets its ints back
        return {_decoded(args[0], k): _decoded(args[1], v) for k, v in value.items()}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return from_validated(annotation, value)
    if annotation in (Path, int, float) or (isinstance(annotation, type) and issubclass(annotation, int)):
        return annotation(value)  # Path, int keys, ByteSize; float(1) as validation would have it
    return value
