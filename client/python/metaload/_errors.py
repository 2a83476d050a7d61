"""Exceptions: the same failures, and the same messages, as metactl's exit codes.

The one table is the C++ core's (``include/metaload/errors.h``, docs/cli.md "Exit codes"):
``BadInputError`` where ``metactl`` exits 2 (fix the request, the files or the configuration),
``MetaTensorError`` where it exits 3 (a tensor would stay, or stayed, on ``meta``),
``LoadError`` where it exits 1 (the system or storage failed: a daemon down, a deadline, an I/O
error, a stream that ended early), and ``BusyError``, a ``LoadError``, where it exits 1 saying
"try again" (a daemon's queue or stream table is full: retry later).
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional


class Finding(NamedTuple):
    """One tensor left on meta or unfilled: its name, the rank that holds it, and why."""

    tensor: str
    rank: int
    why: str


class Error(Exception):
    """Base of every metaload exception."""


class BadInputError(Error, ValueError):
    """The request, the files or the configuration are wrong (metactl exits 2)."""


class LoadError(Error, RuntimeError):
    """The load could not finish: a daemon unreachable, a deadline, an I/O error (exit 1)."""


class BusyError(LoadError):
    """A daemon is busy (a full queue, stream table or upload budget): try again (exit 1)."""


class MetaTensorError(Error, RuntimeError):
    """A tensor would stay, or stayed, on meta (metactl exits 3).

    ``findings`` lists every such tensor on every rank: ``Finding(tensor, rank, why)``.
    """

    def __init__(self, message: str, findings: Optional[List[Finding]] = None) -> None:
        super().__init__(message)
        self.findings: List[Finding] = list(findings or [])
