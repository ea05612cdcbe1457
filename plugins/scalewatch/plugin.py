"""Registers the scalewatch pages with Airflow: the history dashboard in the nav, the reports under it.

An installed package registers it through the `airflow.plugins` entry point (pyproject.toml); a checkout
through `plugins/scalewatch_plugin.py`, which imports it from here.
"""

from __future__ import annotations

from typing import ClassVar

from airflow.plugins_manager import AirflowPlugin

from scalewatch.web.app import app


class ScalewatchPlugin(AirflowPlugin):
    name = "scalewatch"

    fastapi_apps: ClassVar[list] = [{"app": app, "url_prefix": "/scalewatch/reports", "name": "scalewatch reports"}]

    external_views: ClassVar[list] = [
        {  # one nav entry (two would fold into a "Plugins" menu): the dashboard, which links the report list
            "name": "Scaling history",
            "href": "/scalewatch/reports/history",
            "destination": "nav",
            "url_route": "scalewatch-history",
        },
    ]
