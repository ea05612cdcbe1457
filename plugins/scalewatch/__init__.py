"""Thin Airflow glue around the `bench` library: operators, triggers, notifiers, report view."""
