"""The exception tree. Every user-facing failure is one of these, rendered as one line.

`exit_code` follows the CLI convention: 2 for bad usage or input, 1 for runtime failure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ClusterMgrError(Exception):
    """Base of every error clustermgr reports to a person."""

    exit_code = 1


class ConfigError(ClusterMgrError):
    """The configuration file or an argument is wrong; the message names where."""

    exit_code = 2


class UsageError(ClusterMgrError):
    """A command was called with arguments that cannot work."""

    exit_code = 2


class DatabaseError(ClusterMgrError):
    """The database is unreachable, read-only or otherwise unusable."""


class SchemaOutOfDateError(DatabaseError):
    """The database schema is older (or newer) than this clustermgr expects."""

    exit_code = 2


class NotFoundError(ClusterMgrError):
    """A named object (node, template, provider) does not exist."""

    exit_code = 2


class IllegalTransitionError(ClusterMgrError):
    """A node state change that the lifecycle table does not allow."""


class ConflictError(ClusterMgrError):
    """Another process changed the same row first and retries ran out."""


class WorkloadError(ClusterMgrError):
    """The workload manager (Slurm) could not be read or did not accept a command."""


class StagingError(ClusterMgrError):
    """Moving job data in or out failed."""


class ErrorKind(enum.StrEnum):
    """What the engine can do about a provider failure; mapped from SDK error codes."""

    CAPACITY = "CAPACITY"
    QUOTA = "QUOTA"
    THROTTLED = "THROTTLED"
    AUTH = "AUTH"
    TRANSIENT = "TRANSIENT"
    INVALID = "INVALID"
    OTHER = "OTHER"


@dataclass(frozen=True)
class ErrorRow:
    """One row of a provider's code table: a service's error code, its kind, and why."""

    code: str
    kind: ErrorKind
    why: str


class ProviderError(ClusterMgrError):
    """A cloud call failed. `kind` drives fallback and backoff; `code` is the SDK's own code."""

    def __init__(self, kind: ErrorKind, message: str, *, provider: str = "", code: str = ""):
        super().__init__(message)
        self.kind = kind
        self.provider = provider
        self.code = code

    def __str__(self) -> str:
        where = f"provider {self.provider}: " if self.provider else ""
        code = f" [{self.code}]" if self.code else ""
        return f"{where}{self.kind.value}{code}: {self.args[0]}"
