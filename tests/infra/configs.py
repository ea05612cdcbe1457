"""A run's config (or a launcher's RunSpec) with some settings changed, as the tests vary one: by the
settings' flat names, into their groups, and validated as the model validates it (a
`model_copy(update=...)` would skip both)."""

from __future__ import annotations

from typing import TypeVar

from bench.config.models import GROUP_OF, SETTING_GROUPS
from bench.config.types import Frozen, parse

M = TypeVar("M", bound=Frozen)


def changed(model: M, **values) -> M:
    """`model` with each of `values` set: a setting by its flat name (into its group, which the model must
    hold), or one of the model's own fields."""
    fields = {name: getattr(model, name) for name in type(model).model_fields}
    held = [g for g in SETTING_GROUPS if g in fields]
    fields |= {group: fields[group].model_dump() for group in held}
    for name, value in values.items():
        if GROUP_OF.get(name) in held:
            fields[GROUP_OF[name]][name] = value
        else:
            fields[name] = value
    return parse(type(model), fields, groups=tuple(held))
