"""The trust boundary's one rule: which settings a run's conf may set, and the refusal of a conf that
sets one only a suite file or the deployment may.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from bench.config.form import DEPLOYMENT_PLACES, RUN_PLACES, SET_BY_DEPLOYMENT, SET_BY_RUN, SetBy
from bench.config.models import SETTING_FIELDS, SuiteSettings, Thresholds
from bench.config.types import BUILTIN_WORKLOADS, parse
from bench.errors import ConfigError

# --- The trust boundary's one rule (see SetBy above) ---


def set_by(name: str) -> SetBy:
    """Who may set SuiteSettings' `name`: a run's conf, or only a suite file and the deployment."""
    extra = SETTING_FIELDS[name].json_schema_extra
    return extra.get("set_by", SET_BY_RUN) if isinstance(extra, dict) else SET_BY_RUN


DEPLOYMENT_SETTINGS: tuple[str, ...] = tuple(n for n in SETTING_FIELDS if set_by(n) == SET_BY_DEPLOYMENT)
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


# --- Bounds a run's conf sets: judged by them, kept out of the shared history ---


def conf_bounds(settings: SuiteSettings, suite: Mapping) -> tuple[str, ...]:
    """The `bounds` settings that a run's settings (`settings`: the suite's values with its conf) hold at
    other than the suite's own (`suite`: the form's defaults). A run may be judged by bounds of its own,
    but which runs enter the history every run is judged against is the suite's to say: such a run is
    kept out of it (SweepConfig.conf_bounds). Compared as validated values: the form sending the suite's
    0.7 (or "16" for a table's 16) is no change."""
    given = {name: suite[name] for name in Thresholds.model_fields if name in suite}
    own = parse(Thresholds, given, "suite: ")
    return tuple(name for name in Thresholds.model_fields if getattr(settings.bounds, name) != getattr(own, name))
