"""The scalewatch web pages mounted in the Airflow API server; every route is behind Airflow's auth."""
