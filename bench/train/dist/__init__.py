"""Distributed backends behind one interface (`Dist`): Horovod and torch DDP, and how `auto` picks.

`auto` follows the launcher first: Horovod's env (horovodrun, the suite's launchers on Horovod) means
Horovod, torchrun's env without Horovod's means DDP; otherwise Horovod where it imports, else DDP.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from bench.errors import ConfigError

if TYPE_CHECKING:
    from bench.train.dist.base import Dist

BACKENDS: tuple[str, ...] = ("horovod", "ddp", "auto")


def horovod_imports() -> bool:
    try:
        import horovod.torch  # noqa: F401
    except Exception:  # ImportError, or a build whose library does not load (OSError, undefined symbol)
        return False
    return True


def resolve(name: str) -> str:
    """The backend that runs for `name` here: "horovod" or "ddp"."""
    if name not in BACKENDS:
        raise ConfigError(f"backend: {name!r} is not one of {', '.join(BACKENDS)}")
    if name != "auto":
        return name
    env = os.environ
    if "HOROVOD_RANK" not in env and "OMPI_COMM_WORLD_RANK" not in env and "RANK" in env and "MASTER_ADDR" in env:
        return "ddp"
    return "horovod" if horovod_imports() else "ddp"


def init(backend: str = "auto", bind: str = "none") -> Dist:
    """Join the run on `backend`, settle this rank's slot (exchange, --bind auto), return its Dist."""
    name = resolve(backend)
    if name == "horovod":
        if not horovod_imports():
            raise ConfigError("backend: horovod does not import here; use backend ddp (or auto)")
        from bench.train.dist.horovod import HorovodDist

        dist: Dist = HorovodDist.start()
    else:
        from bench.train.dist.ddp import DdpDist

        dist = DdpDist.start()
    dist.settle_slot(bind)
    return dist


def __getattr__(name: str):
    if name == "Dist":  # torch loads only where a rank runs, not where a launcher resolves `auto`
        from bench.train.dist.base import Dist

        return Dist
    raise AttributeError(name)


__all__ = ["BACKENDS", "Dist", "init", "resolve"]
