"""Property tests: generated hostile input on every surface (strategies and surfaces in
`tests/harness/hostile/`). For each: no uncaught exception, nothing outside `agents/{agent}/`
ever changes (the whole temp root is compared: the data directory's parent, a sibling
directory with bait for planted links, another agent), and a refused input leaves the
agent's directory as it was. `bench/fuzz.py` runs the same surfaces at volume."""

from __future__ import annotations

import logging

import pytest
from hypothesis import HealthCheck, given, settings

from tests.harness import hostile

pytestmark = pytest.mark.slow  # generated inputs per surface: ~40 s

FAST = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
SLOW = settings(FAST, max_examples=150)


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.WARNING)  # refusals log warnings by design
    yield
    logging.disable(logging.NOTSET)


def _judge(surface: hostile.Surface, example: object) -> None:
    outcome = hostile.check(surface, example)
    assert outcome.error is None, outcome.error
    assert outcome.outside_writes == [], f"wrote outside the agent: {outcome.outside_writes}"
    assert outcome.unintended == [], f"a refused input changed the disk: {outcome.unintended}"


@FAST
@given(hostile.CLI.strategy)
def test_cli_argv_exits_0_or_2_and_writes_only_its_agent(example):
    _judge(hostile.CLI, example)


@pytest.mark.slow
@SLOW
@given(hostile.ENTRY_FILES.strategy)
def test_entry_files_hostile_json_links_and_fifos_are_skipped(example):
    _judge(hostile.ENTRY_FILES, example)


@FAST
@given(hostile.JOURNAL.strategy)
def test_journal_lines_never_change_what_readers_serve(example):
    _judge(hostile.JOURNAL, example)


@FAST
@given(hostile.VOCABULARY.strategy)
def test_vocabulary_file_malformed_means_the_builtin_list(example):
    _judge(hostile.VOCABULARY, example)


@settings(FAST, max_examples=200)
@given(hostile.SETTINGS.strategy)
def test_settings_from_env_raise_only_settings_errors(example):
    _judge(hostile.SETTINGS, example)


@FAST
@given(hostile.ENRICHMENT.strategy)
def test_enrichment_replies_parse_validate_and_save_whole(example):
    _judge(hostile.ENRICHMENT, example)


@FAST
@given(hostile.CONSOLIDATION.strategy)
def test_consolidation_replies_never_reach_a_failing_write(example):
    _judge(hostile.CONSOLIDATION, example)


@FAST
@given(hostile.REPAIR.strategy)
def test_repair_replies_never_reach_a_failing_write(example):
    _judge(hostile.REPAIR, example)


@FAST
@given(hostile.PREFERENCES.strategy)
def test_preference_replies_save_whole(example):
    _judge(hostile.PREFERENCES, example)


@FAST
@given(hostile.WORKING.strategy)
def test_working_memory_segment_files(example):
    _judge(hostile.WORKING, example)


@FAST
@given(hostile.CONVERSATION.strategy)
def test_conversation_session_files(example):
    _judge(hostile.CONVERSATION, example)


@FAST
@given(hostile.CONVERSATION_LOG.strategy)
def test_conversation_log_lines(example):
    _judge(hostile.CONVERSATION_LOG, example)


@FAST
@given(hostile.CLUSTERS.strategy)
def test_consolidation_clusters_file(example):
    _judge(hostile.CLUSTERS, example)


@settings(FAST, max_examples=60)
@given(hostile.IMPORT.strategy)
def test_import_files_are_taken_whole_or_refused_whole(example):
    _judge(hostile.IMPORT, example)


@FAST
@given(hostile.UNDO.strategy)
def test_dream_undo_run_ids_are_refused_at_once_or_find_nothing(example):
    _judge(hostile.UNDO, example)
