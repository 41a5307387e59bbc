"""``memkit bench NAME [its options]``: a benchmark from an install or from a checkout."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

from memkit.cli._output import CliError, ExitCode

__all__ = ["bench", "available"]

PACKAGES = ("memkit_benchmarks", "benchmarks")
"""Installed, the benchmarks are ``memkit_benchmarks`` (a top-level ``benchmarks`` would collide in
site-packages); in a checkout they are ``benchmarks``."""


def _checkout() -> Path:
    import memkit

    return Path(memkit.__file__).resolve().parent.parent / "benchmarks"


def _package() -> ModuleType | None:
    """The checkout's benchmarks when memkit runs from a checkout (an editable install's copy in
    site-packages is frozen at install time), else the installed ones."""
    checkout = _checkout()
    order = reversed(PACKAGES) if (checkout / "__init__.py").exists() else iter(PACKAGES)
    for name in order:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    return None


def available() -> list[str]:
    package = _package()
    if package is None:
        return []
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_"))


def bench(args: argparse.Namespace) -> int:
    package = _package()
    known = available()
    if package is None or args.name not in known:
        where = "no benchmarks are installed" if package is None else f"try {', '.join(known)}"
        raise CliError(f"no benchmark {args.name!r} ({where})", "memkit bench NAME --help shows a benchmark's "
                       "options", ExitCode.USAGE)  # fmt: skip
    module = importlib.import_module(f"{package.__name__}.{args.name}")
    sys.argv = [f"memkit bench {args.name}", *args.args]  # each benchmark parses its own options
    module.main()
    return ExitCode.OK
