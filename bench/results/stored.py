"""A stored suite run's config read back typed: the one reader of `suite_runs.config` (issue 52).

A run stores its SweepConfig as JSON. What its readers need from it (the history dashboard, the overview,
the run comparison's API) is the thresholds the run was judged with: its `bounds` group (`thresholds` in
the runs stored before the settings were grouped, with the same fields); each of them used to read the raw
dict and fill in the defaults again (`th.get("regression_tolerance", DEFAULT_REGRESSION_TOLERANCE)`),
a second definition of every default it named. Here the thresholds come back as `bench.config.Thresholds`:
a key the run did not store takes the model's default, the settings' own, never a reader's.

Lenient, since stored configs outlive the code that wrote them: text that is not a JSON object reads as no
config; a key Thresholds no longer has is ignored; a value today's limits refuse (a limit tightened since
the run) is left out with a warning naming it, and takes the model's default, so one old run never stops
a page from drawing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from bench.config.models import Thresholds
from bench.config.types import parse
from bench.errors import ConfigError

logger = logging.getLogger(__name__)


def stored_config(value: str | Mapping | None) -> dict:
    """The stored config as a dict ({} where none was stored or it is not a JSON object)."""
    if isinstance(value, Mapping):
        return dict(value)
    try:
        doc = json.loads(value) if isinstance(value, str) and value else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def stored_thresholds(value: str | Mapping | None) -> Thresholds | None:
    """The thresholds the run's stored config held (the model's defaults for keys it lacks); None where
    it held none (a run stored before thresholds were kept: nothing to draw its bound from)."""
    doc = stored_config(value)
    held = doc.get("bounds", doc.get("thresholds"))
    if not isinstance(held, Mapping) or not held:
        return None
    known = {k: v for k, v in held.items() if k in Thresholds.model_fields}
    try:
        return parse(Thresholds, known)
    except ConfigError as error:
        kept = {k: v for k, v in known.items() if _valid(k, v)}
        logger.warning("stored thresholds: %s; the defaults stand in for them", error)
        return parse(Thresholds, kept)


def _valid(key: str, value) -> bool:
    try:
        parse(Thresholds, {key: value})
    except ConfigError:
        return False
    return True


def thresholds_or_defaults(value: str | Mapping | None) -> Thresholds:
    """stored_thresholds, the model's defaults where the run stored none: what a run judged with the
    defaults (or stored before its thresholds were kept) is read as."""
    return stored_thresholds(value) or Thresholds()
