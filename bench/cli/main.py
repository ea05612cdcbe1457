"""`bench` command line: flags become typed config here, errors become messages here, once."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bench.cli import checkpoint, data, project, results, storage, sweep, train, workloads
from bench.errors import BenchError, ConfigError, DatasetError, ResultsInputError

# One module per command group, each adding its sub-commands (and their handler, as `func`).
COMMAND_GROUPS = (train, data, results, sweep, storage, checkpoint, project, workloads)

EXIT_FAIL, EXIT_BAD_INPUT = 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on bad flags already; keep that and name the flag in one line. No abbreviations:
    `--gpu 1` is a typo to refuse, not a prefix of --gpus to guess."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for group in COMMAND_GROUPS:
        group.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, DatasetError, ResultsInputError) as error:
        print(f"bench {args.command}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BenchError as error:
        print(f"bench {args.command}: {error}", file=sys.stderr)
        return EXIT_FAIL
