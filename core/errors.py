"""One error tree for what Dreamkeeper refuses or cannot do, mapped once — to the CLI's
exit codes (`exit_code`) and to Temporal failure types (`failure_type`, which a client
maps back with `error_for`).

    DreamkeeperError            exit 1
    ├── InvalidInput            exit 2   bad input: nothing was written
    │   └── SettingsError                a setting out of range
    ├── NotFound                exit 2   no such memory
    ├── Conflict                exit 2   the write would clobber something unexpected
    │   ├── StoreMismatch                two parties on different stores
    │   └── ReplaceRefused               a save's `replaces` names another subject
    ├── Unavailable             exit 1   Temporal, a worker or the disk did not answer
    │   ├── DatabaseUnavailable  exit 2   PostgreSQL refused or did not answer a connection
    │   ├── StoreUnwritable              the data directory refuses writes
    │   └── LLMUnavailable               the LLM endpoint: a 5xx or no connection
    ├── LLMRejected             exit 1   the LLM endpoint refused the request (a 4xx)
    └── MalformedLLMOutput      exit 1   the LLM's reply is not what the prompt asked for

A failure type is the `type` of the ApplicationError an activity raises, recorded in
workflow histories and matched by the retry policies' non-retryable lists
(`NON_RETRYABLE_TYPES`, `LLM_NON_RETRYABLE_TYPES`): renaming one changes what running
workflows and committed histories mean, so each is spelt once, here.
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


class ReplaceRefused(Conflict):
    """A save named an entry it replaces that is about something else (another entity
    or attribute, `policies.supersede`): nothing was saved."""

    failure_type = "ReplaceRefused"


class Unavailable(DreamkeeperError):
    """Temporal, a worker or an endpoint did not answer in time; retrying may help."""

    exit_code = 1
    failure_type = "Unavailable"
    retryable = True


class DatabaseUnavailable(Unavailable):
    """PostgreSQL refused a connection or did not answer (stopped, unreachable, a wrong
    password or database name), with the database's location and PostgreSQL's cause.
    Retried inside workflows, since an outage ends; a command that meets it exits 2, since
    until someone fixes the server or the URL asking again gets the same answer."""

    exit_code = 2
    failure_type = "DatabaseUnavailable"


class StoreUnwritable(Unavailable):
    """The store's files cannot be written (read-only, full, permissions)."""

    failure_type = "StoreUnwritable"


class LLMUnavailable(Unavailable):
    """The LLM endpoint answered 5xx or not at all: retried, within the step's policy."""

    failure_type = "LLMUnavailable"


class LLMRejected(DreamkeeperError):
    """The LLM endpoint refused the request (4xx), or none is configured: asking again
    gets the same answer."""

    failure_type = "LLMRejected"


class MalformedLLMOutput(DreamkeeperError):
    """The reply is not what the prompt asked for (too big, too deep, not JSON, the wrong
    shape): parsing is deterministic, so asking again for the same reply cannot help."""

    failure_type = "MalformedLLMOutput"


_STORE_ERRORS = (
    InvalidInput,
    NotFound,
    Conflict,
    StoreMismatch,
    Unavailable,
    DatabaseUnavailable,
    StoreUnwritable,
)
_LLM_ERRORS = (LLMRejected, MalformedLLMOutput, LLMUnavailable)
# Answered, never raised out of an activity (a save's result carries it): mapped back by
# clients, and no part of the retry policies' lists the histories were recorded with.
_ANSWERS = (ReplaceRefused,)
_BY_FAILURE_TYPE = {cls.failure_type: cls for cls in (*_STORE_ERRORS, *_LLM_ERRORS, *_ANSWERS)}
# What a store step never retries (an LLM failure never comes out of one).
NON_RETRYABLE_TYPES = [cls.failure_type for cls in _STORE_ERRORS if not cls.retryable]
# What an LLM step never retries: the endpoint's refusals and unusable replies, and the
# store's own (an LLM step reads and writes the store too).
LLM_NON_RETRYABLE_TYPES = [
    *(cls.failure_type for cls in _LLM_ERRORS if not cls.retryable),
    *NON_RETRYABLE_TYPES,
]


def error_for(failure_type: str | None, message: str) -> DreamkeeperError | None:
    """The error a failure of this Temporal type stands for, or None if not ours."""
    cls = _BY_FAILURE_TYPE.get(failure_type or "")
    return cls(message) if cls is not None else None
