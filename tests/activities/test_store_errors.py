"""How `StoreRegistry.using()` hands a store's failure to Temporal: a Dreamkeeper error
becomes an ApplicationError of its failure type (retryable only when the class is), an
unwritable disk is retried a few times and then fails for good, anything else passes
through untouched (a bug is not sorted as a refusal)."""

from __future__ import annotations

import dataclasses
import errno

import pytest
from temporalio.exceptions import ApplicationErrorCategory
from temporalio.testing import ActivityEnvironment

from dreamkeeper.activities.stores import UNWRITABLE_ATTEMPTS
from dreamkeeper.core.errors import (
    Conflict,
    DreamkeeperError,
    InvalidInput,
    NotFound,
    StoreMismatch,
    StoreUnwritable,
    Unavailable,
)
from tests.activities.conftest import AGENT, Run


def raising(registry, exc: BaseException):
    def step() -> None:
        with registry.using(AGENT):
            raise exc

    return step


@pytest.mark.parametrize(
    ("error", "benign"),
    [
        (InvalidInput, True),
        (NotFound, True),
        (Conflict, True),
        (StoreMismatch, False),
        (Unavailable, False),
    ],
)
def test_a_dreamkeeper_error_keeps_its_type_and_retryability(run, registry, error, benign):
    failure = run.fails(raising(registry, error("refused")))
    assert (failure.type, failure.message) == (error.failure_type, "refused")
    assert failure.non_retryable is not error.retryable
    expected = ApplicationErrorCategory.BENIGN if benign else ApplicationErrorCategory.UNSPECIFIED
    assert failure.category == expected


def at_attempt(attempt: int) -> Run:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=attempt)
    return Run(env=env)


def test_an_unwritable_store_is_retried_then_fails_for_good(registry):
    full = OSError(errno.ENOSPC, "No space left on device")
    early = at_attempt(1).fails(raising(registry, full))
    final = at_attempt(UNWRITABLE_ATTEMPTS).fails(raising(registry, full))
    assert early.type == final.type == StoreUnwritable.failure_type
    assert not early.non_retryable and final.non_retryable
    assert "No space left on device" in final.message


@pytest.mark.parametrize(
    "exc", [OSError(errno.ENOENT, "No such file"), RuntimeError("a bug"), KeyError("id")]
)
def test_any_other_failure_passes_through_unsorted(run, registry, exc):
    with pytest.raises(type(exc)) as caught:
        run(raising(registry, exc))
    assert caught.value is exc and not isinstance(caught.value, DreamkeeperError)
