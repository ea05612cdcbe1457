"""The checkout's plugins folder entry: the plugin itself is `scalewatch.plugin`, which an installed package
registers through the `airflow.plugins` entry point instead."""

from scalewatch.plugin import ScalewatchPlugin

__all__ = ["ScalewatchPlugin"]
