"""Launchers register themselves (issue 52): each is the module bench.launch.<name>, which builds it, and
the registry names none of them (an if-chain there made adding a launcher touch four files)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from bench.config.types import LAUNCHERS
from bench.errors import ConfigError
from bench.launch.options import LauncherOptions
from bench.launch.registry import build_launcher

REGISTRY = Path(__file__).resolve().parents[3] / "bench" / "launch" / "registry.py"


@pytest.mark.parametrize("name", LAUNCHERS)
def test_each_launcher_is_its_own_module_and_builds_itself(name):
    module = importlib.import_module(f"bench.launch.{name}")
    assert name == module.NAME
    built = module.build(LauncherOptions())
    assert type(built) is type(build_launcher(name)) and built.name == name


def test_the_registry_names_no_launcher_and_refuses_an_unknown_one():
    literals = {n.value for n in ast.walk(ast.parse(REGISTRY.read_text())) if isinstance(n, ast.Constant)}
    assert not literals & set(LAUNCHERS), "the registry names a launcher: build it in its own module"
    with pytest.raises(ConfigError, match="launcher: 'pbs' is not one of local, ssh, slurm"):
        build_launcher("pbs")
