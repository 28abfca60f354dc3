"""The conversation log writer and the settled-cluster state file."""

from __future__ import annotations

from datetime import UTC, datetime

from dreamkeeper.policies.gating import SettledCluster
from dreamkeeper.stores.conversation.conversation_log import KEEP_ROTATED, ConversationLog
from dreamkeeper.stores.dream_state.consolidation_state import ClusterState

T = datetime(2026, 4, 1, tzinfo=UTC)


def test_log_appends_rotates_once_and_skips_torn_lines(tmp_path):
    log = ConversationLog(tmp_path)
    assert log.rotate("r1") is None  # nothing to rotate
    log.append("s1", "user", "hello", T)
    log.append("s1", "assistant", "hi", T)
    with log.path.open("a") as handle:
        handle.write('{"sessionId": "s1", "role": "us')  # a crash mid-append
    rotated = log.rotate("r1")
    assert rotated == log.rotate("r1")  # a retry finds the same file
    assert [t.content for t in ConversationLog.read(rotated)] == ["hello", "hi"]
    assert not log.path.exists()
    log.append("s2", "user", "after the rotation", T)
    assert [t.session_id for t in ConversationLog.read(log.path)] == ["s2"]


def test_only_the_newest_rotated_logs_are_kept(tmp_path):
    log = ConversationLog(tmp_path)
    for n in range(KEEP_ROTATED + 3):
        log.append("s", "user", f"turn {n}", T)
        log.rotate(f"r{n:03d}")
    assert len(list(log.processed.glob("*.jsonl"))) == KEEP_ROTATED


def test_cluster_state_round_trips_and_a_malformed_file_is_set_aside(tmp_path):
    state = ClusterState(tmp_path)
    record = SettledCluster(("a", "b"), 2, T)
    state.save([record])
    assert state.load() == {record.key: record}
    state.path.write_text("{broken")
    assert state.load() == {}
    assert state.path.with_suffix(".json.malformed").exists()
