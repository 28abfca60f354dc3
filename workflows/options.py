"""Activity options, in one place: timeouts, heartbeats and retries for each kind of step.

Every store step heartbeats (the registry does it from a helper thread), so its
heartbeat timeout is seconds: a worker killed mid-step is noticed and the step resumes
on another worker within ~10 s, whatever its start-to-close timeout. Retries are
bounded; failures that retrying cannot fix are non-retryable at the source.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy
from temporalio.workflow import ActivityConfig, LocalActivityConfig

from dreamkeeper.core.errors import LLM_NON_RETRYABLE_TYPES, NON_RETRYABLE_TYPES

NON_RETRYABLE = NON_RETRYABLE_TYPES
HEARTBEAT = timedelta(seconds=10)

STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=10,
    non_retryable_error_types=NON_RETRYABLE,
)
LLM_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=1),
    maximum_attempts=6,
    non_retryable_error_types=LLM_NON_RETRYABLE_TYPES,
)

# One store write or lookup: an entry, a fact, a retirement.
STORE_STEP = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=2),
    heartbeat_timeout=HEARTBEAT,
    retry_policy=STORE_RETRY,
)
# A pass over the whole store (fold, gating, purge, decay): long, but heartbeating.
SCAN_STEP = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=30),
    heartbeat_timeout=HEARTBEAT,
    retry_policy=STORE_RETRY,
)
# An LLM call: the activity heartbeats while it waits for the endpoint.
LLM_STEP = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=10),
    heartbeat_timeout=HEARTBEAT,
    retry_policy=LLM_RETRY,
)
ENRICH_STEP = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=5),
    heartbeat_timeout=HEARTBEAT,
    retry_policy=LLM_RETRY,
)
EMBED_STEP = ActivityConfig(
    start_to_close_timeout=timedelta(minutes=10),
    heartbeat_timeout=timedelta(seconds=30),
    retry_policy=RetryPolicy(
        initial_interval=timedelta(seconds=5),
        maximum_attempts=3,
        non_retryable_error_types=NON_RETRYABLE,
    ),
)
# The save's first step runs in the workflow task (the caller is waiting on it).
PERSIST_STEP = LocalActivityConfig(
    start_to_close_timeout=timedelta(seconds=30),
    retry_policy=STORE_RETRY,
)


def with_summary(preset: ActivityConfig, summary: str) -> ActivityConfig:
    """A preset plus the step's summary (shown in the UI), as one typed set of options."""
    return ActivityConfig(**preset, summary=summary)


def local_with_summary(preset: LocalActivityConfig, summary: str) -> LocalActivityConfig:
    return LocalActivityConfig(**preset, summary=summary)
