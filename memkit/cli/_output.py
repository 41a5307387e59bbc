"""What the command prints: JSON for scripts, tables for people, and errors as one or two lines.

Exit codes tell a script what went wrong without parsing text:

    0  done
    1  failed for another reason (the message says which)
    2  usage: a wrong option or argument, or a confirmation not given
    3  bad input: a value memkit refused (empty content, importance outside 0..1, a bad import line...)
    4  the storage cannot be reached or used (server down, a path that does not exist or cannot be written)
    5  not found: no memory, episode or checkpoint with that id
    6  configuration: a missing extra, another embedder's collection, a backend that lacks a capability
    130 interrupted (Ctrl-C)
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from enum import IntEnum
from typing import Any

__all__ = ["CliError", "ExitCode", "classify", "print_json", "print_table", "shorten"]


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    BAD_INPUT = 3
    UNREACHABLE = 4
    NOT_FOUND = 5
    CONFIGURATION = 6
    INTERRUPTED = 130


class CliError(Exception):
    """An error the command explains itself: a message, what to do next, and its exit code."""

    def __init__(self, message: str, hint: str | None = None, code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.hint = hint
        self.code = code


def _leaf(exc: BaseException) -> BaseException:
    """The one error inside single-error groups (a task group's way of passing it on)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def classify(exc: BaseException) -> tuple[ExitCode, str, str | None]:
    """Exit code, message and hint for any error a command raised."""
    from memkit import errors

    exc = _leaf(exc)
    if isinstance(exc, CliError):
        return exc.code, str(exc), exc.hint
    table: list[tuple[type[BaseException] | tuple[type[BaseException], ...], ExitCode, str | None]] = [
        (errors.NotFoundError, ExitCode.NOT_FOUND, "list what there is with 'memkit list'"),
        ((errors.ValidationError, errors.ScopeError), ExitCode.BAD_INPUT, None),
        ((errors.ConfigurationError, errors.CapabilityError), ExitCode.CONFIGURATION, None),
        ((errors.BackendUnavailableError, errors.BackendTimeoutError, errors.BackendRefusedError),
         ExitCode.UNREACHABLE, "check --url (or $MEMKIT_URL) and that the server is running"),
        (OSError, ExitCode.UNREACHABLE, None),
    ]  # fmt: skip
    for kinds, code, hint in table:
        if isinstance(exc, kinds):
            message = exc.args[0] if isinstance(exc, errors.NotFoundError) and exc.args else str(exc)
            return code, str(message), hint
    if isinstance(exc, errors.MemkitError):
        return ExitCode.FAILED, f"{type(exc).__name__}: {exc}", None
    return ExitCode.FAILED, f"{type(exc).__name__}: {exc}", "run again with --debug for the full traceback"


def print_json(payload: Any) -> None:
    import msgspec

    sys.stdout.write(json.dumps(msgspec.to_builtins(payload), ensure_ascii=False, indent=2) + "\n")


def shorten(text: str, width: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: max(width - 1, 1)] + "…"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    if value is None:
        return "-"
    return str(value)


def print_table(rows: Sequence[Mapping[str, Any]], columns: Iterable[str], *, wide: str | None = None) -> None:
    """Aligned columns; the ``wide`` column (content) is cut to what the terminal has left."""
    columns = list(columns)
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    if wide in columns:
        at = columns.index(wide)
        room = shutil.get_terminal_size((120, 24)).columns - sum(w + 2 for i, w in enumerate(widths) if i != at)
        widths[at] = max(min(widths[at], room), 20)
        for row in cells:
            row[at] = shorten(row[at], widths[at])
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
