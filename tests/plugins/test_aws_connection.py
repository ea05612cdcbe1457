"""The suite's `aws_conn_id` (issue 64 item 1): an Airflow connection of the Amazon provider's `aws` type
read into the standard AWS variables, through Airflow's own lookup (a connection given as an
AIRFLOW_CONN_* variable, as a deployment's secrets backend would hand it). Another type's login and
password are no AWS keys, an endpoint carrying credentials would reach the report, and the ranks get
S3's own endpoint variable only, never a key (a global AWS_ENDPOINT_URL would also redirect the task
process's other AWS clients, a secrets backend's)."""

from __future__ import annotations

import json
import os

import pytest

from bench.config.models import DataSettings
from bench.errors import ConfigError
from scalewatch.connections import aws_variables, export_s3_endpoint, s3_store_variables

ENDPOINT = "http://10.0.0.7:7480"


def _conn(monkeypatch, name: str, conn_type: str = "aws", endpoint: str = ENDPOINT) -> None:
    doc = {"conn_type": conn_type, "login": "AKIDEXAMPLE", "password": "s3cr3t-value"}
    doc["extra"] = {"endpoint_url": endpoint, "region_name": "eu-west-9"}
    monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", json.dumps(doc))


def test_an_aws_connection_gives_the_four_variables(monkeypatch):
    _conn(monkeypatch, "sw_s3")
    assert aws_variables("sw_s3") == {
        "AWS_ENDPOINT_URL": ENDPOINT,
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
        "AWS_DEFAULT_REGION": "eu-west-9",
    }
    data = DataSettings(dataset_path="s3://weekly-data/suite", aws_conn_id="sw_s3")
    assert s3_store_variables(data)["AWS_ACCESS_KEY_ID"] == "AKIDEXAMPLE"
    assert s3_store_variables(DataSettings(dataset_path="/data", aws_conn_id=None)) is None


def test_another_type_or_an_endpoint_with_credentials_is_refused_naming_the_connection(monkeypatch):
    _conn(monkeypatch, "sw_mail", conn_type="smtp")
    with pytest.raises(ConfigError, match="aws_conn_id: connection 'sw_mail' is of type 'smtp', not 'aws'"):
        aws_variables("sw_mail")
    _conn(monkeypatch, "sw_leaky", endpoint="http://AKID:secret@10.0.0.7:7480")
    with pytest.raises(ConfigError, match=r"aws_conn_id 'sw_leaky': endpoint_url: .* is not an http\(s\)://HOST"):
        aws_variables("sw_leaky")


def test_the_ranks_get_s3s_own_endpoint_variable_and_no_key(monkeypatch):
    _conn(monkeypatch, "sw_s3")
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "")  # recorded, so the export below is undone after the test
        monkeypatch.delenv(name)
    export_s3_endpoint(DataSettings(dataset_path="s3://weekly-data/suite", aws_conn_id="sw_s3"))
    assert os.environ["AWS_ENDPOINT_URL_S3"] == ENDPOINT
    assert "AWS_ENDPOINT_URL" not in os.environ and "AWS_SECRET_ACCESS_KEY" not in os.environ
    assert "AWS_ACCESS_KEY_ID" not in os.environ
    from bench.launch.environment import rank_environment

    assert rank_environment()["AWS_ENDPOINT_URL_S3"] == ENDPOINT  # the allow-list passes it on
