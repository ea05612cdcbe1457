"""Reading user-given settings: unknown names refused with the closest known ones, renamed ones
mapped, then validated once into `SuiteSettings`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from bench.config.models import SETTING_FIELDS, SETTING_GROUPS, SuiteSettings
from bench.config.types import logger, parse
from bench.errors import ConfigError

SETTING_NAMES: tuple[str, ...] = tuple(SETTING_FIELDS)


def environment_defaults(home: Path | str, cluster: str | None) -> dict:
    """The two defaults that come from where the suite runs ($SCALEWATCH_HOME, $SCALEWATCH_CLUSTER)."""
    return {"dataset_path": str(Path(home) / "data"), "cluster": cluster or "local"}


def unknown_settings(keys) -> str | None:
    """The one rule for names a suite run does not know (conf keys, suite files, --config files): a
    message naming each unknown key and the closest known names, or None when every key is known."""
    import difflib

    unknown = [k for k in keys if k not in SETTING_FIELDS]
    if not unknown:
        return None
    parts = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), SETTING_NAMES, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        parts.append(f"unknown setting {str(key)!r}{hint}")
    return "; ".join(parts) + f" (known settings: {', '.join(SETTING_NAMES)})"


# Settings renamed since suite files and confs were written: old name -> new. The old name still loads
# (renamed_settings), with a deprecation naming both; giving both is an error.
RENAMED_SETTINGS: dict[str, str] = {
    # Thresholds and `bench evaluate --bounds` always called the table this; the suite now does too.
    "scaling_efficiency_by_gpus": "min_scaling_efficiency_by_gpus",
}


def renamed_settings(values: dict, prefix: str = "") -> dict:
    """`values` with each old setting name (RENAMED_SETTINGS) given its new name: a DeprecationWarning
    and a logged warning name both; both names at once raise ConfigError naming both."""
    values = dict(values)
    for old, new in RENAMED_SETTINGS.items():
        if old not in values:
            continue
        if new in values:
            raise ConfigError(
                f"{prefix}{old} and {new} are both given: {old} is the old name of {new}; keep {new} only"
            )
        message = f"{prefix}setting {old!r} is deprecated, renamed {new!r}: rename the key (its value is taken)"
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        logger.warning("%s", message)
        values[new] = values.pop(old)
    return values


def settings_from(values: dict, prefix: str = "") -> SuiteSettings:
    """User-given settings (a conf, a suite file, a --config file) validated once: old names renamed
    (renamed_settings), unknown names refused, then every value; mapping keys become strings, as JSON
    has them. Raises ConfigError naming the field."""
    values = renamed_settings(values, prefix)
    message = unknown_settings(values)
    if message:
        raise ConfigError(prefix + message)
    values = {k: {str(i): v for i, v in val.items()} if isinstance(val, dict) else val for k, val in values.items()}
    # an error names the setting as the user wrote it: by its flat name, not its group's path
    return parse(SuiteSettings, values, prefix, groups=tuple(SETTING_GROUPS))
