"""Registers the scalewatch report view with Airflow (a nav link and a FastAPI app)."""

from __future__ import annotations

from typing import ClassVar

from airflow.plugins_manager import AirflowPlugin

from scalewatch.web.app import app


class ScalewatchPlugin(AirflowPlugin):
    name = "scalewatch"

    fastapi_apps: ClassVar[list] = [{"app": app, "url_prefix": "/scalewatch/reports", "name": "scalewatch reports"}]

    external_views: ClassVar[list] = [
        {
            "name": "Scaling reports",
            "href": "/scalewatch/reports/",
            "destination": "nav",
            "url_route": "scalewatch-reports",
        },
        {
            "name": "Scaling history",
            "href": "/scalewatch/reports/history",
            "destination": "nav",
            "url_route": "scalewatch-history",
        },
    ]
