"""The `bench` command line: one module per command group (train, data, results, sweep, storage,
project); `main` turns flags into typed config and errors into messages and exit codes, once."""

from bench.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
