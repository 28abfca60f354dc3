"""Conversation memory: retention, eviction to the archive, idle expiry, the log — on
both backends (`tests/stores/conftest.py`); what is about the files is file-only."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import utc_now
from dreamkeeper.stores.contract import ConversationStore
from dreamkeeper.stores.conversation.conversation_memory import MAX_ARCHIVED, MAX_RETAINED
from dreamkeeper.stores.files.conversation_memory import FileConversationStore


@pytest.fixture
def conversations(make_conversations) -> ConversationStore:
    return make_conversations()


def _talk(memory: ConversationStore, session: str, n: int, clock=None) -> None:
    for i in range(n):
        if clock is not None:
            clock.advance(seconds=30)
        memory.add_turn(session, "user" if i % 2 == 0 else "assistant", f"turn {i + 1}")


def test_the_defaults_are_the_references():
    assert (MAX_RETAINED, MAX_ARCHIVED) == (50, 500)


def test_turns_past_retention_move_to_the_archive_in_order(conversations, backend, tmp_path):
    _talk(conversations, "s1", 60)
    conv = conversations.conversation("s1")
    assert len(conv.retained) == 50 and len(conv.archived) == 10
    assert [t.content for t in conv.turns] == [f"turn {i}" for i in range(1, 61)]
    assert [t.n for t in conv.turns] == list(range(1, 61))
    if backend != "file":
        return
    archive = tmp_path / "agents" / "a1" / "conversations" / "archive" / "s1.jsonl"
    assert len(archive.read_text().splitlines()) == 10


def test_the_archive_keeps_its_newest_turns_only(make_conversations, tier_db, tmp_path):
    memory = make_conversations(max_retained=5, max_archived=20)
    _talk(memory, "s1", 300)
    conv = memory.conversation("s1")
    assert len(conv.archived) == 20 and conv.turns[0].content == "turn 276"
    assert conv.turns[-1].content == "turn 300"
    if tier_db is not None:
        with tier_db.transaction() as conn:
            stored = conn.execute("SELECT count(*) FROM dreamkeeper_conversation_turns").fetchone()
        assert stored == (25,)  # trimmed, not unbounded
        return
    archive = tmp_path / "agents" / "a1" / "conversations" / "archive" / "s1.jsonl"
    assert len(archive.read_text().splitlines()) <= 20 + 100  # trimmed, not unbounded


def test_an_idle_session_expires_and_restarting_it_discards_its_archive(conversations, clock):
    _talk(conversations, "s1", 55)
    clock.advance(minutes=59)
    assert len(conversations.conversation("s1")) == 55
    clock.advance(minutes=62)
    assert len(conversations.conversation("s1")) == 0  # never read back once expired
    conversations.add_turn("s1", "user", "hello again")
    conv = conversations.conversation("s1")
    assert [t.content for t in conv.turns] == ["hello again"] and conv.archived == ()


def test_sessions_are_separate_and_clear_ends_one(conversations):
    _talk(conversations, "s1", 3)
    _talk(conversations, "s2", 2)
    conversations.clear("s1")
    assert len(conversations.conversation("s1")) == 0
    assert len(conversations.conversation("s2")) == 2


def test_every_turn_goes_to_the_conversation_log(conversations, tmp_path):
    conversations.add_turn("s1", "user", "I prefer metric units")
    conversations.add_turn("s1", "assistant", "Noted.")
    assert [(t.session_id, t.role, t.content) for t in conversations.log.read()] == [
        ("s1", "user", "I prefer metric units"),
        ("s1", "assistant", "Noted."),
    ]


def test_a_turn_archived_twice_by_a_crash_is_read_once(tmp_path, clock):
    conversations = FileConversationStore(tmp_path, "a1", clock=clock)
    _talk(conversations, "s1", 52)
    archive = tmp_path / "agents" / "a1" / "conversations" / "archive" / "s1.jsonl"
    lines = archive.read_text().splitlines()
    archive.write_text("\n".join(lines + lines[-1:]) + "\n{torn")
    fresh = FileConversationStore(tmp_path, "a1", clock=conversations._clock)
    assert [t.content for t in fresh.conversation("s1").turns][:3] == ["turn 1", "turn 2", "turn 3"]
    assert len(fresh.conversation("s1")) == 52


def test_another_instance_sees_new_turns(make_conversations):
    writer = make_conversations()
    reader = make_conversations()
    _talk(writer, "s1", 55)
    assert len(reader.conversation("s1")) == 55
    writer.add_turn("s1", "user", "one more")
    assert reader.conversation("s1").turns[-1].content == "one more"
    assert len(reader.conversation("s1").archived) == 6


def test_a_reader_sees_a_session_cleared_and_begun_again_at_the_same_instant(
    make_conversations,
):
    writer, reader = make_conversations(), make_conversations()  # the clock stands still
    _talk(writer, "s1", 3)
    assert [t.content for t in reader.conversation("s1").turns] == ["turn 1", "turn 2", "turn 3"]
    writer.clear("s1")
    for word in ("new one", "new two", "new three", "new four"):
        writer.add_turn("s1", "user", word)
    assert [t.content for t in reader.conversation("s1").turns] == [
        "new one",
        "new two",
        "new three",
        "new four",
    ]


BAD_SESSION_IDS = [
    "../x",
    "a/../b",
    "..",
    "a/..",
    "/abs",
    "a/",
    "a//b",
    "a/./b",
    ".hidden",
    "a\\b",
    "a b",
    "s1\n",
    "a/b\n/c",
    "x.json/y",
    "x/y.JSONL",
    "",
    "x" * 129,
    "/".join(["s"] * 9),
]


@pytest.mark.parametrize(
    "session, role, content",
    [("../x", "user", "hi"), ("s1", "system", "hi"), ("s1", "user", "x" * 100_001)]
    + [(bad, "user", "hi") for bad in BAD_SESSION_IDS],
)
def test_bad_input_is_refused_and_writes_nothing(conversations, tmp_path, session, role, content):
    with pytest.raises(InvalidInput):
        conversations.add_turn(session, role, content)
    assert conversations.sessions(include_expired=True) == []
    assert not (tmp_path / "agents" / "a1" / "conversations" / "sessions").exists()
    assert not (tmp_path / "agents" / "a1" / "conversations" / "archive").exists()
    assert {p.name for p in tmp_path.iterdir()} <= {"agents"}  # nothing escaped either


@pytest.mark.parametrize("session", ["session/blazor-session", "user.42/chat_1/t-3"])
def test_a_nested_session_id_persists_across_a_restart_in_nested_directories(
    tmp_path, clock, session
):
    first = FileConversationStore(tmp_path, "a1", clock=clock, max_retained=5)
    _talk(first, session, 8)
    root = tmp_path / "agents" / "a1" / "conversations"
    *dirs, name = session.split("/")
    assert root.joinpath("sessions", *dirs, f"{name}.json").is_file()
    assert root.joinpath("archive", *dirs, f"{name}.jsonl").is_file()
    restarted = FileConversationStore(tmp_path, "a1", clock=clock, max_retained=5)
    conv = restarted.conversation(session)
    assert [t.content for t in conv.turns] == [f"turn {i}" for i in range(1, 9)]
    assert len(conv.archived) == 3


def test_sessions_lists_every_live_session_nested_ones_too(make_conversations):
    first = make_conversations()
    for session in ("s2", "session/blazor-session", "s1", "session/other"):
        first.add_turn(session, "user", "hello")
    restarted = make_conversations()
    assert restarted.sessions() == ["s1", "s2", "session/blazor-session", "session/other"]
    restarted.clear("session/other")
    assert first.sessions() == ["s1", "s2", "session/blazor-session"]


def test_sessions_leaves_out_expired_ones_unless_asked(conversations, make_conversations, clock):
    conversations.add_turn("old", "user", "hello")
    clock.advance(hours=2)
    conversations.add_turn("new", "user", "hello")
    assert conversations.sessions() == ["new"]
    assert conversations.sessions(include_expired=True) == ["new", "old"]
    assert make_conversations("a2").sessions() == []


def test_sessions_skips_files_that_are_not_sessions(tmp_path, clock):
    conversations = FileConversationStore(tmp_path, "a1", clock=clock)
    conversations.add_turn("s1", "user", "hello")
    sessions = conversations.root / "sessions"
    (sessions / ".s1.json.123.tmp").write_text("{}")  # a write in progress
    (sessions / "notes.txt").write_text("stray")
    (sessions / "bad name.json").write_text("{}")
    assert conversations.sessions(include_expired=True) == ["s1"]


_TALKER = """
import sys
from tests.stores.children import open_tier
store = open_tier("conversations", sys.argv[1])
for i in range(int(sys.argv[2])):
    store.add_turn("s1", "user", f"{sys.argv[3]} #{i}")
"""


def test_two_processes_adding_turns_to_one_session_never_reuse_a_number(
    make_conversations, store_location
):
    talkers = [
        subprocess.Popen([sys.executable, "-c", _TALKER, store_location, "15", who])
        for who in ("left", "right")
    ]
    assert [t.wait(timeout=60) for t in talkers] == [0, 0]
    conv = make_conversations(clock=utc_now).conversation("s1")
    assert [t.n for t in conv.turns] == list(range(1, 31))  # each number once, none lost
    assert sorted(t.content for t in conv.turns) == sorted(
        f"{who} #{i}" for who in ("left", "right") for i in range(15)
    )


def test_a_database_turn_that_dies_half_way_is_not_kept(database_url, clock):
    from dreamkeeper.stores import faults
    from dreamkeeper.stores.postgres.conversation_memory import PostgresConversationStore
    from dreamkeeper.stores.postgres.database import Database

    db = Database(database_url, max_size=2)
    memory = PostgresConversationStore(db, "a1", clock=clock)
    memory.add_turn("s1", "user", "kept")
    with faults.armed(faults.ROWS_HALF_WRITTEN), pytest.raises(faults.SimulatedCrash):
        memory.add_turn("s1", "assistant", "lost with its transaction")
    assert [t.content for t in memory.conversation("s1").turns] == ["kept"]
    assert memory.add_turn("s1", "assistant", "retried").n == 2  # the number is not burnt
    db.close()
