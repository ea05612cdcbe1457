"""Suite files: one YAML file per cluster or storage system, each becoming its own DAG.

A suite file holds the trigger form's fields (the DAG's Params) as that suite's defaults, plus its
`schedule` and `description`. It is validated twice at load time, with the same typed config as
everything else: each value against its Param's JSON schema, then the whole as a SweepConfig, so a
bad value is an error naming the file and the field before any DAG is built.

Every suite DAG comes from one Airflow loader file, so one suite file must never fail, hang or
exhaust that parse for the others: only regular files are read (never a link, FIFO or device, and
never with a blocking open), at most MAX_SUITE_FILE_BYTES of them, as UTF-8, and the YAML may
neither nest deeper than MAX_YAML_DEPTH nor expand (through aliases) past MAX_YAML_NODES nodes.
Any failure of one file, expected or not, becomes that file's error; errors are kept short.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import ConfigError

SUITE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
SUITE_KEYS = ("schedule", "description")  # suite-level keys; every other key is a Param of the form
SUITE_SUFFIXES = (".yaml", ".yml")
MAX_SUITE_FILE_BYTES = 256 << 10
MAX_YAML_DEPTH = 32  # nesting, aliases followed: a suite file needs 3 or 4
MAX_YAML_NODES = 20_000  # nodes once every alias is expanded: what validation and the DAG will walk
MAX_ERROR_CHARS = 500  # one file's error; values are never shown whole


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    schedule: str | None
    description: str
    defaults: dict = field(default_factory=dict)  # Param name -> value


def dag_id(name: str) -> str:
    return f"scaling_regression__{name}"


def load_suites(folder: Path, check) -> tuple[list[Suite], dict[Path, str]]:
    """Every `*.yaml` / `*.yml` in folder: (valid suites, {file: error}); one bad file never hides the rest.

    `check(name, defaults)` validates the Param values (raising ConfigError naming the field); the DAG
    side passes the form's own schema check and its mapping to SweepConfig. Two files with one stem
    (`a.yaml`, `a.yml`) would be one DAG: both are refused rather than one silently winning.
    """
    suites: list[Suite] = []
    errors: dict[Path, str] = {}
    if not folder.is_dir():
        return suites, errors
    try:
        paths = sorted(p for p in folder.iterdir() if p.suffix in SUITE_SUFFIXES)
    except OSError as error:
        return suites, {folder: f"{folder}: cannot list the suite folder ({error.strerror})"}
    by_stem: dict[str, list[Path]] = defaultdict(list)
    for path in paths:
        by_stem[path.stem].append(path)
    for path in paths:
        twins = by_stem[path.stem]
        if len(twins) > 1:
            names = " and ".join(p.name for p in twins)
            errors[path] = _short(f"{path}: suite {path.stem!r} is defined by both {names}; keep one (neither loads)")
            continue
        try:
            suites.append(load_suite(path, check))
        except ConfigError as error:
            errors[path] = _short(str(error))
        except Exception as error:  # a bug or odd file in one suite must not stop the others
            errors[path] = _short(f"{path}: cannot be loaded ({type(error).__name__}: {error})")
    return suites, errors


def load_suite(path: Path, check) -> Suite:
    name = path.stem
    if not SUITE_NAME_RE.fullmatch(name):
        raise ConfigError(f"{path}: file name {_show(name)} must match {SUITE_NAME_RE.pattern} (it names the DAG)")
    doc = parse_yaml(path, read_suite_text(path))
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: must be a mapping of field: value, got {type(doc).__name__}")
    schedule = doc.pop("schedule", None)
    if schedule is not None and not isinstance(schedule, str):
        raise ConfigError(f"{path}: schedule: must be a cron string or null, got {type(schedule).__name__}")
    if isinstance(schedule, str) and schedule.strip().lower() in ("", "none"):
        schedule = None
    if schedule is not None:
        _check_cron(path, schedule)
    description = doc.pop("description", "") or ""
    if not isinstance(description, str):
        raise ConfigError(f"{path}: description: must be text, got {type(description).__name__}")
    from bench.config.settings import renamed_settings

    # an old setting name loads as its new one, with a deprecation naming both (both at once: an error)
    defaults = renamed_settings({str(k): v for k, v in doc.items()}, f"{path}: ")
    try:
        check(name, defaults)
    except ConfigError as error:
        raise ConfigError(_short(f"{path}: {error}")) from None
    return Suite(name, path, schedule, description, defaults)


def read_suite_text(path: Path) -> str:
    """The file's text, if it is a regular file (not a link) of at most MAX_SUITE_FILE_BYTES of UTF-8.

    Checked with lstat before opening and with fstat on the descriptor after (the name may be swapped
    in between); the open neither follows a link nor waits (O_NOFOLLOW|O_NONBLOCK), so a FIFO or a
    device planted under a suite name is refused without ever blocking or reading it.
    """
    try:
        before = os.lstat(path)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from None
    _require_regular(path, before.st_mode)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as error:
        raise ConfigError(f"{path}: cannot open ({error.strerror}); suite files must be regular files") from None
    try:
        st = os.fstat(fd)
        _require_regular(path, st.st_mode)
        if st.st_size > MAX_SUITE_FILE_BYTES:
            raise ConfigError(f"{path}: {st.st_size} bytes, larger than the {MAX_SUITE_FILE_BYTES}-byte limit")
        chunks, size = [], 0
        while size <= MAX_SUITE_FILE_BYTES and (chunk := os.read(fd, MAX_SUITE_FILE_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_SUITE_FILE_BYTES:  # grew since fstat
            raise ConfigError(f"{path}: larger than the {MAX_SUITE_FILE_BYTES}-byte limit")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text (invalid byte at offset {error.start})") from None


def _require_regular(path: Path, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    kinds = {
        stat.S_ISLNK: "a symbolic link",
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    kind = next((name for test, name in kinds.items() if test(mode)), "not a regular file")
    raise ConfigError(f"{path}: is {kind}; a suite file must be a regular file (links are not followed)")


def parse_yaml(path: Path, text: str):
    """One YAML document through a SafeLoader bounded in nesting and in alias expansion."""
    import yaml

    loader = _bounded_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(path, node)
        return loader.construct_document(node)
    except _TooDeep as error:
        raise ConfigError(
            f"{path}: nested deeper than {MAX_YAML_DEPTH} levels (line {error.line}); a suite file is a flat mapping"
        ) from None
    except yaml.YAMLError as error:
        raise ConfigError(_short(f"{path}: not valid YAML ({error})")) from None
    finally:
        loader.dispose()


class _TooDeep(Exception):
    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


@functools.cache
def _bounded_loader() -> type:
    """SafeLoader whose composer stops past MAX_YAML_DEPTH levels (its recursion would otherwise
    overflow Python's stack on a few hundred kilobytes of brackets). Built on first use: the DAG
    file imports this module and should not pay for yaml until it reads a suite."""
    import yaml

    class BoundedSafeLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):
            if self.depth >= MAX_YAML_DEPTH:
                raise _TooDeep(self.peek_event().start_mark.line + 1)
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return BoundedSafeLoader


def _check_expansion(path: Path, root) -> None:
    """Refuses a node graph whose alias-expanded tree exceeds MAX_YAML_NODES nodes or MAX_YAML_DEPTH
    levels, or refers to itself: PyYAML shares aliased nodes, so a few hundred bytes can stand for a
    billion values that validation, error messages and Airflow's serialisation would each walk."""
    import yaml

    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded height)
    open_nodes: set[int] = set()

    def measure(node, depth: int) -> tuple[int, int]:
        key = id(node)
        if depth > MAX_YAML_DEPTH:
            raise ConfigError(f"{path}: nested deeper than {MAX_YAML_DEPTH} levels once its aliases are followed")
        if key in open_nodes:
            raise ConfigError(f"{path}: an alias refers to a node that contains it (line {node.start_mark.line + 1})")
        if key not in measured:
            if isinstance(node, yaml.SequenceNode):
                children = node.value
            elif isinstance(node, yaml.MappingNode):
                children = [part for pair in node.value for part in pair]
            else:
                children = []
            open_nodes.add(key)
            count, height = 1, 1
            for child in children:
                child_count, child_height = measure(child, depth + 1)
                count, height = count + child_count, max(height, child_height + 1)
                if count > MAX_YAML_NODES:
                    raise ConfigError(
                        f"{path}: expands to more than {MAX_YAML_NODES} values once its aliases are followed "
                        f"(line {node.start_mark.line + 1}); refusing it"
                    )
            open_nodes.discard(key)
            measured[key] = (count, height)
        count, height = measured[key]
        if depth + height > MAX_YAML_DEPTH:
            raise ConfigError(
                f"{path}: nested deeper than {MAX_YAML_DEPTH} levels once its aliases are followed "
                f"(line {node.start_mark.line + 1})"
            )
        return count, height

    measure(root, 0)


def _show(value: str, limit: int = 60) -> str:
    """repr of a short text, cut: a message never carries a value whole."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 5]}...'"


def _short(message: str) -> str:
    if len(message) <= MAX_ERROR_CHARS:
        return message
    return f"{message[: MAX_ERROR_CHARS - 30]}... ({len(message)} chars)"


def _check_cron(path: Path, schedule: str) -> None:
    from croniter import croniter

    if not croniter.is_valid(schedule):
        raise ConfigError(f"{path}: schedule: {_show(schedule)} is not a valid cron expression")
