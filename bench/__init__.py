"""scalewatch bench: the library and CLI behind the weekly scaling-regression suite."""

__version__ = "0.1.0"
