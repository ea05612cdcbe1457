"""Every default is defined once (issue 42): a setting's default lives in its group of
bench.config.SuiteSettings (SETTING_FIELDS, by its flat name), and the internal models, the CLI's flags and
the shipped suite file take it from there instead of writing the value again. These tests fail when a
literal default or a literal set of choices reappears. The `bounds` and `alerts` groups are the internal
views themselves (Thresholds, AlertTargets): nothing to compare there, and the last test holds that."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Literal, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from bench.config import checkpoint, defaults, form, models, settings, trust
from bench.config import types as config_types

ROOT = Path(__file__).resolve().parents[2]
# The config package's modules, and every name they define, read as one (what this file checks is the
# package's, whichever of its modules a definition lives in).
CONFIG_FILES = sorted((ROOT / "bench" / "config").glob("*.py"))
config = SimpleNamespace(
    **{
        k: v
        for m in (config_types, defaults, form, checkpoint, models, settings, trust)
        for k, v in vars(m).items()
        if not k.startswith("__")
    }
)


def config_trees() -> list[ast.Module]:
    return [ast.parse(p.read_text()) for p in CONFIG_FILES]


CLI = sorted((ROOT / "bench" / "cli").glob("*.py"))

# The models that hold settings' values internally, and their fields named otherwise there.
# SweepConfig and RunSpec are not among them: they hold the groups themselves (the last test holds both).
INTERNAL = ("TrainConfig",)
OTHER_NAME = {("TrainConfig", "drop_caches"): "evict_dataset"}
# TrainConfig's own defaults for `bench train` by hand (its docstring says why each differs); the suite
# passes its value for each explicitly (SuiteSettings.rank_template), checked below.
OWN = {("TrainConfig", "steps"), ("TrainConfig", "image_size"), ("TrainConfig", "min_measure_s")}


def default(model: type[BaseModel], name: str):
    return model.model_fields[name].get_default(call_default_factory=True)


def setting_default(setting: str):
    return config.SETTING_FIELDS[setting].get_default(call_default_factory=True)


def group_of(setting: str) -> type[BaseModel]:
    return config.SETTING_GROUPS[config.GROUP_OF[setting]]


def shared_fields():
    """(model name, field, the SuiteSettings setting it shares a default with), for every such field."""
    settings = config.SETTING_FIELDS
    for model_name in INTERNAL:
        model = getattr(config, model_name)
        for name, info in model.model_fields.items():
            setting = OTHER_NAME.get((model_name, name), name)
            if setting in settings and not info.is_required():
                yield model_name, name, setting


def class_defaults(path: Path) -> dict[tuple[str, str], ast.expr | None]:
    """(class, field) -> the expression its default is written as (Field(x, ...)'s x), None for none."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                value = item.value
                if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "Field":
                    keywords = {k.arg: k.value for k in value.keywords}
                    value = value.args[0] if value.args else keywords.get("default")
                found[(node.name, item.target.id)] = value
    return found


def is_literal(expr: ast.expr | None) -> bool:
    if expr is None:
        return False
    try:
        ast.literal_eval(expr)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def test_the_internal_models_take_every_shared_default_from_the_settings():
    pairs = list(shared_fields())
    assert len(pairs) > 10  # the check sees the fields (TrainConfig, the rank's own model, shares over a dozen)
    wrong = [
        f"{m}.{n}: {default(getattr(config, m), n)!r}, setting {s}: {setting_default(s)!r}"
        for m, n, s in pairs
        if (m, n) not in OWN and default(getattr(config, m), n) != setting_default(s)
    ]
    assert not wrong, "defaults that disagree with the suite's: " + "; ".join(wrong)


def test_no_shared_default_is_written_as_a_literal_a_second_time():
    written = {k: v for path in CONFIG_FILES for k, v in class_defaults(path).items()}
    literal = [f"{m}.{n}" for m, n, _ in shared_fields() if (m, n) not in OWN and is_literal(written.get((m, n)))]
    assert not literal, (
        "written again as a literal (take it with suite_default/default_of from SuiteSettings): " + ", ".join(literal)
    )


def test_train_configs_own_defaults_differ_and_the_suite_passes_its_own(tmp_path):
    train = config.SuiteSettings().rank_template(tmp_path / "data")
    for model_name, name in sorted(OWN):
        assert default(config.TrainConfig, name) != setting_default(name), (
            f"{model_name}.{name} equals the suite's default now: take it with suite_default instead"
        )
        assert name in train, f"rank_template must pass {name} explicitly: TrainConfig's own default is not the suite's"
    assert train["loader_threads"] == config.SuiteSettings().where.cpus_per_rank  # one loader thread per owned core


def test_one_literal_per_set_of_choices_in_the_config():
    """A Literal written out twice in bench/config/ is two definitions of one set of choices."""
    seen: dict[str, int] = {}
    for node in (n for tree in config_trees() for n in ast.walk(tree)):
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "Literal":
            key = ast.dump(node.slice)
            seen[key] = seen.get(key, 0) + 1
    twice = [k for k, n in seen.items() if n > 1]
    assert not twice, f"Literals written more than once in bench/config/ (name one alias each): {twice}"


def model_field_names() -> set[str]:
    """Every field with a default of the models a flag can set, pydantic or dataclass."""
    from bench.analysis.projection.inputs import Given
    from bench.data.generate import GenerateSpec
    from bench.storage.checkpoint import CheckpointSpec
    from bench.storage.fio_probe import ProbeSettings

    names: set[str] = set()
    for value in vars(config).values():
        if isinstance(value, type) and issubclass(value, BaseModel):
            names |= {n for n, info in value.model_fields.items() if not info.is_required()}
    names |= {n for n, info in CheckpointSpec.model_fields.items() if not info.is_required()}
    for cls in (GenerateSpec, ProbeSettings, Given):
        names |= {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    return names


def add_arguments(path: Path):
    """(line, dest, {keyword: expression}) of every parser.add_argument(...) in a CLI module."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            long = next((f for f in flags if f.startswith("--")), flags[0] if flags else "")
            dest = keywords["dest"].value if isinstance(keywords.get("dest"), ast.Constant) else None
            yield node.lineno, dest or long.lstrip("-").replace("-", "_"), keywords


@pytest.mark.parametrize("path", CLI, ids=[p.name for p in CLI])
def test_no_flag_restates_a_models_default_or_choices(path):
    fields = model_field_names()
    wrong = []
    for line, dest, keywords in add_arguments(path):
        value = keywords.get("default")
        if is_literal(value) and ast.literal_eval(value) is not None and dest in fields:
            wrong.append(f"line {line} --{dest}: default={ast.unparse(value)} (take it with default_of(Model, ...))")
        if is_literal(keywords.get("choices")):
            wrong.append(f"line {line} --{dest}: choices={ast.unparse(keywords['choices'])} (take choices_of(...))")
    assert not wrong, f"{path.relative_to(ROOT)}: " + "; ".join(wrong)


def literal_values(tp) -> tuple:
    return get_args(tp) if get_origin(tp) is Literal else ()


def test_the_clis_own_choice_tuples_are_their_literals():
    """data.py and project.py name their choices (importing numpy or pandas at every `bench` start to read
    them is what the CLI avoids): they must stay the Literals' values."""
    from bench.analysis.projection import allreduce, inputs
    from bench.cli import data as data_cli
    from bench.cli import project as project_cli
    from bench.data import generate

    assert literal_values(generate.Kind) == data_cli.KINDS
    assert literal_values(inputs.ComputeFrom) == project_cli.COMPUTE_FROM
    assert literal_values(allreduce.Algorithm) == project_cli.ALGORITHMS


def test_flags_left_out_take_the_models_defaults():
    from bench.cli.main import build_parser
    from bench.cli.train import train_config

    args = build_parser().parse_args(["train", "--workload", "ssd", "--synthetic", "--steps", "1"])
    # `bench train`'s flags hold no default of their own: a flag left out is absent, and the model fills it
    assert set(vars(args)) == {"command", "func", "workload", "synthetic", "steps"}, vars(args)
    cfg = train_config(args)
    names = ("preset", "batch_size", "image_size", "warmup_steps", "loader", "loader_threads", "backend", "bind")
    for name in (*names, "drop_caches"):
        assert getattr(cfg, name) == default(config.TrainConfig, name), name
    probe = build_parser().parse_args(["storage", "probe", "--path", "/x"])
    assert (probe.max_jobs, probe.seconds) == (
        config.SuiteSettings().probe.probe_max_jobs,
        config.SuiteSettings().probe.probe_seconds,
    )


def test_the_example_suite_holds_only_what_differs_from_the_defaults():
    doc = yaml.safe_load((ROOT / "suites" / "example.yaml").read_text())
    values = {k: v for k, v in doc.items() if k not in ("schedule", "description")}
    assert not set(values) & set(config.RENAMED_SETTINGS), "the example uses a setting's old name"
    settings = config.settings_from(values).flat()
    defaults = config.SuiteSettings.defaults()
    environment = set(config.environment_defaults("/x", None))  # defaults that depend on where a suite runs
    same = [k for k in values if k not in environment and settings[k] == defaults[k]]
    assert not same, f"suites/example.yaml restates the default of {same}: leave them out"


# Fields that refuse a value the setting takes, each for its reason (none now: RunSpec's ranks_per_node,
# which refused the form's old 0, is the `where` group's own, which reads 0 as None).
OWN_LIMITS: dict[tuple[str, str], dict] = {}


def test_every_shared_field_holds_the_settings_limits():
    """A field holding a setting's value takes the setting's limits (issue 52): two definitions drifted
    apart once (Thresholds' max_step_time_spread and straggler_gap took gt=0 where the form took ge=0.01)."""
    wrong = []
    for model_name, name, setting in shared_fields():
        model = getattr(config, model_name)
        want = config.limits_of(group_of(setting), setting) | OWN_LIMITS.get((model_name, name), {})
        if config.limits_of(model, name) != want:
            wrong.append(f"{model_name}.{name}: {config.limits_of(model, name)}, setting {setting}: {want}")
    assert not wrong, "limits that disagree with the settings': " + "; ".join(wrong)


GROUP_CLASSES = {model.__name__ for model in config.SETTING_GROUPS.values()}


def limit_keywords(call: ast.Call) -> set[str]:
    return {k.arg for k in call.keywords if k.arg in config.LIMITS}


def test_no_shared_limit_is_written_a_second_time():
    """A shared field's limits are read from its setting's group (suite_default, limits_of), never written out:
    the limits test above would pass while both copies agree, and the next edit changes one of them."""
    shared = {(m, n) for m, n, _ in shared_fields()} | {(m, n) for m, n in OWN_LIMITS}
    written = []
    for node in (n for tree in config_trees() for n in tree.body):
        if not isinstance(node, ast.ClassDef) or node.name in GROUP_CLASSES:
            continue
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)) or item.value is None:
                continue
            call = item.value if isinstance(item.value, ast.Call) else None
            keywords = limit_keywords(call) if call is not None else set()
            allowed = set(OWN_LIMITS.get((node.name, item.target.id), {}))
            if (node.name, item.target.id) in shared and keywords - allowed:
                written.append(f"{node.name}.{item.target.id}: {', '.join(sorted(keywords - allowed))}")
    assert not written, "limits written again (take them from the setting): " + "; ".join(written)


def test_shared_element_limits_are_one_annotated_type():
    """A GPU count and an efficiency bound inside a tuple or a table are the named types, not restated."""
    text = "\n".join(p.read_text() for p in CONFIG_FILES)
    for limits in ("Field(ge=1, le=4096)", "Field(ge=0, le=1.5)"):
        assert text.count(limits) == 1, f"{limits} written {text.count(limits)} times in bench/config/"


def test_the_hidden_defaults_are_named_once():
    """The suite's sample interval and MLPerf Storage's AU floor are named constants, written once."""
    sizing = ROOT / "bench" / "analysis" / "verdict" / "sizing.py"
    files = [*CONFIG_FILES, ROOT / "bench" / "workloads" / "spec.py", sizing]
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "min_au" and is_literal(node.value):
                assert ast.literal_eval(node.value) != config.MLPERF_STORAGE_MIN_AU, f"{path.name}: min_au=0.9 again"
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "sample_interval_s":
                        assert not is_literal(value), f"{path.name}: sample_interval_s written as a literal"
    train = config.SuiteSettings().rank_template("/x/data")
    assert train["sample_interval_s"] == config.SUITE_SAMPLE_INTERVAL_S
    assert "AU_TARGET = MLPERF_STORAGE_MIN_AU" in sizing.read_text()
    from bench.workloads.accelerators import PROFILES

    # a measured profile takes the floor; a published one states its config's metric.au (0.85, 0.90)
    restated = [p.name for p in PROFILES.values() if p.basis == "measured" and "min_au" in p.model_fields_set]
    assert not restated, f"measured profiles restating MLPerf Storage's AU floor: {restated}"


def test_the_runs_config_holds_the_setting_groups_themselves(tmp_path):
    """Issue 52: an internal view is its group, not a restatement. The suite's SweepConfig holds the very
    group objects its settings hold (the data group with its dataset placed), declares no setting's field
    of its own, and no other model of the config package declares a bounds or alerts field again."""
    from bench.suite.plan import run_spec

    settings = config.settings_from(
        {"min_scaling_efficiency": 0.6, "email_to": ["a@example.org"], "launcher": "ssh", "hosts": ["n1:2"]}
    )
    cfg = settings.sweep_config(tmp_path, tmp_path / "runs")
    for name in set(config.SETTING_GROUPS) - {"data"}:
        assert getattr(cfg, name) is getattr(settings, name), name
    assert cfg.data == settings.data.model_copy(update={"dataset_path": tmp_path / "data"})
    assert cfg.bounds.min_scaling_efficiency == 0.6 and cfg.alerts.email_to == ("a@example.org",)
    assert cfg.where.hosts == (config.HostSlots(host="n1", slots=2),)  # typed in the group, a string in JSON
    assert settings.flat()["hosts"] == ["n1:2"]
    own = set(config.SweepConfig.model_fields) - set(config.SETTING_GROUPS)
    assert own == {"train", "output_dir", "generate", "conf_bounds"}, own  # conf_bounds: run facts, not settings
    assert not own & set(config.SETTING_FIELDS)
    # a launcher's spec holds the run's `where` group itself, and no setting beside it
    spec = run_spec(cfg, "r", "ssd", 2)
    assert spec.where is cfg.where and not set(config.RunSpec.model_fields) & set(config.SETTING_FIELDS)
    for group in (config.Thresholds, config.AlertTargets, config.WhereSettings):
        again = [
            f"{model.__name__}.{name}"
            for model in (getattr(config, m) for m in INTERNAL)
            for name in model.model_fields
            if name in group.model_fields
        ]
        assert not again, f"{group.__name__}'s fields declared again: {again}"
    # every setting lives in exactly one group, by the name users write
    names = [n for model in config.SETTING_GROUPS.values() for n in model.model_fields]
    assert len(names) == len(set(names)) == len(config.SETTING_FIELDS)
