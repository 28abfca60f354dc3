"""The conversation log writer and the settled-cluster state (both backends:
`tests/stores/conftest.py`)."""

from __future__ import annotations

from datetime import UTC, datetime

from dreamkeeper.policies.gating import SettledCluster
from dreamkeeper.stores.conversation.conversation_log import (
    KEEP_ROTATED,
    LOG,
    PROCESSED,
    ConversationLog,
)
from dreamkeeper.stores.dream_state.consolidation_state import ASIDE, NAME, ClusterState
from dreamkeeper.stores.dream_state.dream_settings import read_approval, write_approval

T = datetime(2026, 4, 1, tzinfo=UTC)


def test_log_appends_rotates_once_and_skips_torn_lines(documents):
    log = ConversationLog(documents)
    assert log.rotate("r1") is None  # nothing to rotate
    log.append("s1", "user", "hello", T)
    log.append("s1", "assistant", "hi", T)
    documents.append(LOG, b'{"sessionId": "s1", "role": "us')  # a crash mid-append
    log.append("s1", "user", "after the crash", T)  # not glued onto the torn line
    rotated = log.rotate("r1")
    assert rotated == log.rotate("r1") == f"{PROCESSED}r1.jsonl"  # a retry finds the same
    assert [t.content for t in log.read(rotated)] == ["hello", "hi", "after the crash"]
    assert documents.read(LOG) is None
    log.append("s2", "user", "after the rotation", T)
    assert [t.session_id for t in log.read()] == ["s2"]


def test_only_the_newest_rotated_logs_are_kept(documents):
    log = ConversationLog(documents)
    for n in range(KEEP_ROTATED + 3):
        log.append("s", "user", f"turn {n}", T)
        log.rotate(f"r{n:03d}")
    kept = documents.names(PROCESSED)
    assert len(kept) == KEEP_ROTATED and kept[0] == f"{PROCESSED}r003.jsonl"


def test_cluster_state_round_trips_and_a_malformed_one_is_set_aside(documents):
    state = ClusterState(documents)
    assert state.load() == {}
    record = SettledCluster(("a", "b"), 2, T)
    state.save([record])
    assert state.load() == {record.key: record}
    documents.write(NAME, b"{broken")
    assert state.load() == {}
    assert documents.read(ASIDE) == b"{broken" and documents.read(NAME) is None


def test_the_approval_setting_round_trips_and_a_bad_one_means_off(documents):
    assert read_approval(documents) is None
    write_approval(documents, "risky")
    assert read_approval(documents) == "risky"
    documents.write("consolidation/dream-settings.json", b'{"approval": "sometimes"}')
    assert read_approval(documents) is None
