"""One error tree for what Dreamkeeper refuses or cannot do, mapped once — to the CLI's
exit codes (`exit_code`) and to Temporal failure types (`failure_type`, which a client
maps back with `error_for`).

    DreamkeeperError            exit 1
    ├── InvalidInput            exit 2   bad input: nothing was written
    │   └── SettingsError                a setting out of range
    ├── NotFound                exit 2   no such memory
    ├── Conflict                exit 2   the write would clobber something unexpected
    │   └── StoreMismatch                two parties on different stores
    └── Unavailable             exit 1   Temporal, a worker or the disk did not answer
        └── StoreUnwritable              the data directory refuses writes
"""

from __future__ import annotations


class DreamkeeperError(Exception):
    """Everything Dreamkeeper raises on purpose."""

    exit_code = 1
    failure_type = "DreamkeeperError"
    retryable = False


class InvalidInput(DreamkeeperError, ValueError):
    """Bad input from a caller: reported as-is, never retried, nothing written."""

    exit_code = 2
    failure_type = "InvalidInput"


class SettingsError(InvalidInput):
    """An environment variable holds a value Dreamkeeper cannot use."""


class NotFound(DreamkeeperError, LookupError):
    """No entry with that id (live or archived)."""

    exit_code = 2
    failure_type = "NotFound"


class Conflict(DreamkeeperError):
    """The write would clobber something that is not what the caller expects."""

    exit_code = 2
    failure_type = "Conflict"


class StoreMismatch(Conflict):
    """Two parties that must share a store are using different ones."""

    failure_type = "StoreMismatch"


class Unavailable(DreamkeeperError):
    """Temporal, a worker or an endpoint did not answer in time; retrying may help."""

    exit_code = 1
    failure_type = "Unavailable"
    retryable = True


class StoreUnwritable(Unavailable):
    """The store's files cannot be written (read-only, full, permissions)."""

    failure_type = "StoreUnwritable"


_BY_FAILURE_TYPE = {
    cls.failure_type: cls
    for cls in (InvalidInput, NotFound, Conflict, StoreMismatch, Unavailable, StoreUnwritable)
}
NON_RETRYABLE_TYPES = [t for t, cls in _BY_FAILURE_TYPE.items() if not cls.retryable]


def error_for(failure_type: str | None, message: str) -> DreamkeeperError | None:
    """The error a failure of this Temporal type stands for, or None if not ours."""
    cls = _BY_FAILURE_TYPE.get(failure_type or "")
    return cls(message) if cls is not None else None
