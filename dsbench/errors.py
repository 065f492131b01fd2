"""Error hierarchy. Every error a user can cause is a :class:`UserError`: one line, no traceback."""

from __future__ import annotations


class DsbenchError(Exception):
    """Base class of dsbench's own errors."""

    exit_code = 1


class UserError(DsbenchError):
    """Bad input (a flag, a file, a value): printed as one line, exit code 2."""

    exit_code = 2


class InvalidConfig(DsbenchError):
    """A configuration was read but has problems; exit code 1."""

    exit_code = 1
