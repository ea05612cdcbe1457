from tests.dags.conftest import airflow_home  # noqa: F401 - the same isolated, migrated Airflow home
