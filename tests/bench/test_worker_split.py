"""Which worker served which agent, read from workflow histories (`worker_split`'s
counting): a completed activity counts for the identity that completed it, a local
activity for the worker whose workflow task recorded its marker; failures, other
markers and identities that are not a storm worker's count as what they are."""

from __future__ import annotations

from temporalio.api.history.v1 import (
    ActivityTaskCompletedEventAttributes,
    ActivityTaskFailedEventAttributes,
    HistoryEvent,
    MarkerRecordedEventAttributes,
    WorkflowTaskCompletedEventAttributes,
)

from tests.harness.audit import LOCAL_ACTIVITY_MARKER, completed_by, worker_of


def _task(identity: str) -> HistoryEvent:
    return HistoryEvent(
        workflow_task_completed_event_attributes=WorkflowTaskCompletedEventAttributes(
            identity=identity
        )
    )


def _marker(name: str = LOCAL_ACTIVITY_MARKER) -> HistoryEvent:
    return HistoryEvent(
        marker_recorded_event_attributes=MarkerRecordedEventAttributes(marker_name=name)
    )


def _completed(identity: str) -> HistoryEvent:
    return HistoryEvent(
        activity_task_completed_event_attributes=ActivityTaskCompletedEventAttributes(
            identity=identity
        )
    )


def test_each_completed_activity_counts_for_the_worker_that_completed_it():
    events = [
        _task("killstorm-w1-4242"),
        _marker(),  # the save's persist step, run locally by w1
        _marker("version"),  # not an activity
        _completed("killstorm-w0-17"),
        HistoryEvent(
            activity_task_failed_event_attributes=ActivityTaskFailedEventAttributes(
                identity="killstorm-w0-17"
            )
        ),
        _task("killstorm-w0-18"),  # a restart of w0: the same worker
        _marker(),
        _completed("12@elsewhere"),
    ]
    assert list(completed_by(events)) == ["w1", "w0", "w0", "12@elsewhere"]


def test_an_identity_names_its_worker_slot_across_restarts():
    assert worker_of("killstorm-w0-1") == worker_of("killstorm-w0-99999") == "w0"
    assert worker_of("killstorm-w12-5") == "w12"
    assert worker_of("") == "unknown"
