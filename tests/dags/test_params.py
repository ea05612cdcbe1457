"""The form is the settings model's: same names, same defaults, same bounds; unknown names refused."""

from __future__ import annotations

import jsonschema
import pytest

from bench.config.models import SETTING_FIELDS, SuiteSettings, Thresholds
from bench.config.settings import settings_from
from bench.errors import ConfigError


@pytest.fixture(autouse=True)
def _airflow(airflow_home):
    """Airflow's SDK reads its home on first import: the session's isolated one, never the user's."""


def params(*args):
    from scalewatch.params import params as form

    return form(*args)


def check_suite_values(name, values):
    from scalewatch.params import check_suite_values as check

    return check(name, values)


def test_every_param_default_is_the_settings_default(monkeypatch, tmp_path):
    monkeypatch.setenv("SCALEWATCH_HOME", str(tmp_path))
    monkeypatch.delenv("SCALEWATCH_CLUSTER", raising=False)
    form = params()
    assert list(form) == list(SETTING_FIELDS)  # every setting, by its flat name, in the form's order
    expected = SuiteSettings.defaults() | {"dataset_path": str(tmp_path / "data"), "cluster": "local"}
    for name, param in form.items():
        assert param.value == expected[name], name
        jsonschema.validate(param.value, param.schema)  # every default passes its own form field


def test_the_bounds_the_dag_applies_are_the_configs(tmp_path):
    """The form's defaults, taken through the one mapping, are Thresholds' defaults (they disagreed once)."""
    cfg = SuiteSettings().sweep_config(tmp_path, tmp_path / "runs")
    assert cfg.bounds == Thresholds()
    form = params()
    assert form["min_scaling_efficiency"].value == Thresholds().min_scaling_efficiency
    assert form["min_bandwidth_efficiency"].value == Thresholds().min_bandwidth_efficiency


@pytest.mark.parametrize(
    "field,value",
    [("partition", "gpu\n"), ("hosts", ["node1\n"]), ("dataset_path", "/data/x\n"), ("conn_id", "ssh\n")],
)
def test_form_patterns_refuse_a_trailing_newline(field, value):
    schema = params()[field].schema
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(value, schema)
    with pytest.raises(ConfigError, match=field):
        settings_from({field: value})


def test_form_patterns_accept_what_the_settings_accept():
    from scalewatch.params import form_schemas

    form = params()
    # conn_id is the deployment's (its form field allows only the suite's value: tests/dags/test_trust_boundary.py)
    jsonschema.validate("gpu", form["partition"].schema)
    settings_from({"partition": "gpu"})
    # hosts too (issue 61): its form field is the suite's value; its own schema's pattern still takes every host
    hosts = ["node1:8", "n-2.example.com"]
    jsonschema.validate(hosts, form_schemas()["hosts"])
    settings_from({"hosts": hosts})


def test_unknown_setting_names_the_key_and_the_closest_names():
    with pytest.raises(ConfigError) as err:
        settings_from({"gpu": [1, 2]})
    assert "'gpu'" in str(err.value) and "did you mean 'gpus'" in str(err.value)


def test_a_suite_file_and_a_conf_share_the_rule():
    with pytest.raises(ConfigError, match="did you mean 'min_scaling_efficiency'"):
        check_suite_values("x", {"min_scaling_eficiency": 0.8})


def test_a_gpu_table_keyed_by_numbers_is_accepted_as_yaml_writes_it():
    values = {"min_scaling_efficiency_by_gpus": {16: 0.9, 32: 0.8}}
    check_suite_values("x", values)
    assert settings_from(values).bounds.min_scaling_efficiency_by_gpus == {16: 0.9, 32: 0.8}  # GPU counts, typed


def test_the_gpu_table_has_the_name_thresholds_and_bench_evaluate_give_it(tmp_path):
    assert "min_scaling_efficiency_by_gpus" in params() and "scaling_efficiency_by_gpus" not in params()
    cfg = settings_from({"min_scaling_efficiency_by_gpus": {16: 0.9}}).sweep_config(tmp_path, tmp_path / "runs")
    assert cfg.bounds.min_scaling_efficiency_by_gpus == {16: 0.9}


def test_the_old_table_name_still_loads_with_a_deprecation_naming_both(caplog):
    with pytest.warns(
        DeprecationWarning, match="'scaling_efficiency_by_gpus' is deprecated.*'min_scaling_efficiency_by_gpus'"
    ):
        settings = settings_from({"scaling_efficiency_by_gpus": {16: 0.9}})
    assert settings.bounds.min_scaling_efficiency_by_gpus == {16: 0.9}
    assert "min_scaling_efficiency_by_gpus" in caplog.text


def test_both_table_names_at_once_are_an_error_naming_both():
    both = {"scaling_efficiency_by_gpus": {16: 0.9}, "min_scaling_efficiency_by_gpus": {16: 0.8}}
    with pytest.raises(ConfigError, match="scaling_efficiency_by_gpus and min_scaling_efficiency_by_gpus are both"):
        settings_from(both)
    with pytest.raises(ConfigError, match="scaling_efficiency_by_gpus and min_scaling_efficiency_by_gpus are both"):
        check_suite_values("x", both)


def test_a_run_conf_with_the_old_table_name_is_taken_with_a_deprecation():
    """Airflow copies a conf key the form lacks into the run's Params, beside the form's default for the
    new name: the conf's old name is the user's table, the Params' copy of it is dropped."""
    from scalewatch.params import settings_from_params

    form = {name: param.value for name, param in params().items()}
    conf = {"scaling_efficiency_by_gpus": {"16": 0.9}}
    with pytest.warns(DeprecationWarning, match="conf: setting 'scaling_efficiency_by_gpus' is deprecated"):
        settings = settings_from_params(form | conf, conf)
    assert settings.bounds.min_scaling_efficiency_by_gpus == {16: 0.9}
    both = conf | {"min_scaling_efficiency_by_gpus": {"16": 0.8}}
    with pytest.raises(ConfigError, match="conf: scaling_efficiency_by_gpus and min_scaling_efficiency_by_gpus"):
        settings_from_params(form | both, both)
    assert settings_from_params(form, {}).bounds.min_scaling_efficiency_by_gpus == {}  # no conf: the form's values


def test_ranks_per_node_is_none_for_all_on_one_node_and_zero_still_means_it(tmp_path):
    assert SuiteSettings().where.ranks_per_node is None and params()["ranks_per_node"].value is None
    assert settings_from({"ranks_per_node": 0}).where.ranks_per_node is None  # the form's old spelling
    cfg = settings_from({"ranks_per_node": 4}).sweep_config(tmp_path, tmp_path / "runs")
    assert cfg.where.ranks_per_node == 4
    assert (
        SuiteSettings().sweep_config(tmp_path, tmp_path / "runs").where.ranks_per_node is None
    )  # config keys as before


def test_fp16_and_cuda_graphs_on_cpu_nodes_are_refused_before_launch(tmp_path):
    for field, value, allowed in (("precision", "fp16", "fp32, bf16"), ("compile", "cuda_graphs", "none")):
        with pytest.raises(ConfigError, match=f"{field}: {value} needs CUDA GPUs.*allowed here: {allowed}"):
            settings_from({field: value}).sweep_config(tmp_path, tmp_path / "runs")
        settings_from({field: value, "gpus_per_node": 8}).sweep_config(tmp_path, tmp_path / "runs")  # GPU nodes
    with pytest.raises(ConfigError, match="precision: Input should be 'fp32', 'bf16' or 'fp16'"):
        settings_from({"precision": "fp8"})
