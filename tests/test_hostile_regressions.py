"""One regression test for each bug the hostile-input fuzzer (tests/harness/hostile) found."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import time
from datetime import UTC, datetime

import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from dreamkeeper.activities import llm
from dreamkeeper.activities.dream_prompts import parse_consolidation, parse_preferences
from dreamkeeper.activities.llm import (
    MAX_FACTS_PER_REPLY,
    MalformedLLMOutput,
    ask_llm,
    parse_enrichment,
    parse_json_reply,
)
from dreamkeeper.cli import main as cli
from dreamkeeper.core.errors import InvalidInput, SettingsError
from dreamkeeper.core.settings import EmbeddingSettings, LLMSettings, TemporalSettings
from dreamkeeper.policies.consolidation import Verdict, review_merge
from dreamkeeper.policies.dedup import Candidate, DedupOutcome
from dreamkeeper.policies.gating import SettledCluster, gate, reopen_delay
from dreamkeeper.policies.merge import MergeProposal, exact_duplicate_folds, merged_entry
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.stores.dream_state.consolidation_state import ClusterState
from dreamkeeper.stores.files.agent_files import AgentFiles
from dreamkeeper.stores.files.conversation_memory import FileConversationStore
from dreamkeeper.stores.files.documents import FileDocuments
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore
from dreamkeeper.stores.longterm.dedup_save import save_fact
from dreamkeeper.stores.search.vocabulary import FILE_NAME, load_vocabulary
from dreamkeeper.stores.vectors.embedding_client import EmbeddingClient
from tests.helpers import tree_snapshot

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
ENTRY = {
    "id": "aaaaaaaaaaa1",
    "content": "Dana's flight is LH 441 on 2026-03-02.",
    "createdAt": "2026-01-01T00:00:00+00:00",
}


class Blocked(BaseException):
    """Not an OSError (TimeoutError is one, and would be caught as a bad file)."""


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail instead of hanging (a FIFO opened without O_NONBLOCK blocks forever)."""

    def expired(*_):
        raise Blocked(f"still blocked after {seconds}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _plant(store: FileMemoryStore, rel: str, body: object) -> None:
    path = store.root / "memory" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body if isinstance(body, str) else json.dumps(body))


# -- safe_json ----------------------------------------------------------------------------


def test_safe_json_refuses_depth_size_constants_and_surrogates_without_recursing():
    for text in [
        "[" * 100_000 + "]" * 100_000,
        '{"a":' * 50_000 + "1" + "}" * 50_000,
        "[NaN]",
        "[1e999]",
        '"\\ud800"',
        "9" * 5_000,
        b"\xff",
    ]:
        with pytest.raises(safe_json.UnsafeJSON):
            safe_json.loads(text, max_bytes=1_000_000, max_depth=32)
    with pytest.raises(safe_json.UnsafeJSON):
        safe_json.loads("[1]" + " " * 100, max_bytes=50)
    assert safe_json.loads('{"a": ["[[[[", {"b": "\\"]]"}]}', max_bytes=100, max_depth=3) == {
        "a": ["[[[[", {"b": '"]]'}]
    }


# -- entry files --------------------------------------------------------------------------


def test_an_entry_time_with_no_utc_equivalent_is_skipped_not_an_overflow(store):
    # Found by the entry-files surface: OverflowError escaped load_entry, so the whole
    # store failed to open.
    store.create("a live entry", entry_id="aaaaaaaaaaa2")
    _plant(store, "aaaaaaaaaaa1.json", {**ENTRY, "createdAt": "0001-01-01T00:00:00+05:00"})
    fresh = FileMemoryStore(store.root.parent.parent, store.agent_id)
    assert [e.id for e in fresh.entries()] == ["aaaaaaaaaaa2"]
    assert any("aaaaaaaaaaa1" in str(p) for p in fresh.problems())


def test_a_fifo_planted_as_an_entry_file_does_not_block_the_store(store):
    store.create("a live entry", entry_id="aaaaaaaaaaa2")
    os.mkfifo(store.root / "memory" / "aaaaaaaaaaa1.json")
    with deadline(10):
        fresh = FileMemoryStore(store.root.parent.parent, store.agent_id)
        assert [e.id for e in fresh.entries()] == ["aaaaaaaaaaa2"]
    assert "not a plain file" in " ".join(fresh.problems().values())


@pytest.mark.parametrize(
    "override",
    [
        {"tags": [f"t{n}" for n in range(40)]},
        {"tags": ["x" * 65]},
        {"content": "a\x00b"},
        {"metadata": {f"k{n}": "v" for n in range(33)}},
        {"metadata": {"subjectTime": "y" * 2_001}},
    ],
)
def test_an_entry_file_the_store_could_not_write_is_not_loaded(store, override):
    # Loaded, it made every later reinforcement or merge of it fail half-way.
    _plant(store, "aaaaaaaaaaa1.json", {**ENTRY, **override})
    assert store.entries() == []
    assert "limits" in " ".join(store.problems().values())


def test_a_legacy_journal_line_naming_another_category_hides_nothing(store):
    # Found by the journal surface: a record without "rev" whose file was absent at the
    # category it named made every reader, long-lived and fresh, forget a live entry.
    store.create("hello Alice", entry_id="aaaaaaaaaaa1", category="people")
    reader = FileMemoryStore(store.root.parent.parent, store.agent_id)
    assert len(reader.entries()) == 1
    with open(store.journal.path, "a") as handle:
        handle.write(
            json.dumps(
                {
                    "at": "2026-01-01T00:00:00+00:00",
                    "action": "updated",
                    "id": "aaaaaaaaaaa1",
                    "category": "notes",
                    "fingerprint": None,
                    "reason": None,
                }
            )
            + "\n"
        )
    assert [e.id for e in reader.entries()] == ["aaaaaaaaaaa1"]
    fresh = FileMemoryStore(store.root.parent.parent, store.agent_id)
    assert [e.id for e in fresh.entries()] == ["aaaaaaaaaaa1"]


# -- save-time dedup, folds and merges within the store's limits ----------------------------


def test_reinforcing_an_entry_at_its_tag_and_metadata_limit_saves(store):
    # 32 tags + new ones, 31 metadata keys + a subject time + the source: the union was
    # refused by put() and the save failed half-way.
    store.create(
        ENTRY["content"],
        entry_id="aaaaaaaaaaa1",
        tags=[f"t{n}" for n in range(32)],
        metadata={f"k{n}": "v" for n in range(31)},
    )
    saved = save_fact(
        store,
        Candidate(
            ENTRY["content"],
            None,
            tuple(f"n{n}" for n in range(32)),
            (("subjectTime", "2026-03-02"), ("source", "user")),
        ),
        new_id="bbbbbbbbbbb1",
        op_id="op-1",
    )
    assert saved.outcome is DedupOutcome.REINFORCED
    entry = store.require("aaaaaaaaaaa1")
    assert entry.tags == [f"t{n}" for n in range(32)] and len(entry.metadata) == 32


def test_folds_and_merges_keep_tags_within_the_limit(store):
    a = store.create("same text", entry_id="aaaaaaaaaaa1", tags=[f"a{n}" for n in range(32)])
    b = store.create("same text", entry_id="aaaaaaaaaaa2", tags=[f"b{n}" for n in range(32)])
    (fold,) = exact_duplicate_folds([a, b])
    store.put(fold.survivor, action=JournalAction.MERGED)  # was refused: 64 tags
    merged = merged_entry("ccccccccccc1", MergeProposal("same text", None), [a, b], T0)
    assert len(merged.tags) == 32
    store.put(merged, action=JournalAction.MERGED)


def test_a_merge_text_the_store_refuses_is_an_invalid_verdict(store):
    source = store.create("Alice, 555-0100", entry_id="aaaaaaaaaaa1")
    review = review_merge(
        "Alice, 555-0100\x00", [source.id], {source.id: source}, {source.id: source.fingerprint}
    )
    assert review.verdict is Verdict.INVALID  # it reached save_merged_entry and failed


# -- LLM replies ------------------------------------------------------------------------------


def test_a_deeply_nested_reply_is_malformed_not_a_recursion_error():
    for parse in (parse_enrichment, parse_consolidation, parse_preferences):
        with pytest.raises(MalformedLLMOutput):
            parse("[" * 100_000 + "]" * 100_000)


def test_the_fence_strip_is_linear_on_whitespace():
    start = time.perf_counter()
    with pytest.raises(MalformedLLMOutput):
        parse_json_reply("[" + " " * 400_000 + "x", "enrichment")
    assert time.perf_counter() - start < 1.0  # the old regex took minutes


def test_enrichment_drops_what_the_store_refuses_and_caps_the_reply():
    bad = [
        {"content": "a\x00b"},
        {"content": "ok", "tags": ["x" * 65]},
        {"content": "ok", "tags": [f"t{n}" for n in range(33)]},
        {"content": "ok", "metadata": {"subjectTime": "y" * 2_001}},
        {"content": "   "},
        "not an object",
    ]
    reply = parse_enrichment(json.dumps([*bad, {"content": "Dana flies LH 441."}]))
    assert [f.content for f in reply.facts] == ["Dana flies LH 441."]
    assert reply.dropped == len(bad)
    many = parse_enrichment(json.dumps([{"content": f"fact {i}"} for i in range(2_000)]))
    assert len(many.facts) == MAX_FACTS_PER_REPLY and many.ignored == 2_000 - MAX_FACTS_PER_REPLY


def test_preferences_leave_room_for_the_inferred_tag_and_drop_what_the_store_refuses():
    reply = parse_preferences(
        json.dumps(
            {
                "toSave": [
                    {"content": "The user prefers tea.", "tags": [f"p{n}" for n in range(32)]},
                    {"content": "The user\x00 prefers coffee."},
                    {"content": "The user prefers metric units.", "tags": ["units"]},
                ]
            }
        )
    )
    assert [p.content for p in reply.to_save] == ["The user prefers metric units."]
    assert reply.dropped == 2


def test_a_lone_surrogate_escape_in_a_reply_is_malformed():
    with pytest.raises(MalformedLLMOutput):
        parse_enrichment('[{"content": "x\\ud800"}]')


@pytest.mark.parametrize(
    "body",
    [
        "[" * 50_000 + "]" * 50_000,  # the completion itself nested deep
        json.dumps({"choices": [{"message": {"content": None}}]}),  # content not text
        json.dumps({"choices": [{"message": {"content": "[" * 50_000 + "]" * 50_000}}]}),
    ],
)
def test_a_bad_completion_fails_at_once_not_after_six_retries(monkeypatch, body):
    def transport(request):
        return httpx.Response(200, content=body.encode())

    real = httpx.AsyncClient
    monkeypatch.setattr(
        httpx, "AsyncClient", lambda **kw: real(transport=httpx.MockTransport(transport), **kw)
    )
    settings = LLMSettings(base_url="http://127.0.0.1:9/v1")

    async def call():
        return await ask_llm(
            settings, [{"role": "user", "content": "x"}], parse_enrichment, "enrichment of test"
        )

    with pytest.raises(ApplicationError) as caught:
        asyncio.run(ActivityEnvironment().run(call))
    assert caught.value.non_retryable and caught.value.type == "MalformedLLMOutput"


def test_a_parser_surprise_is_non_retryable(monkeypatch):
    async def fake_chat(settings, messages):
        return "[]"

    monkeypatch.setattr(llm, "chat", fake_chat)

    def broken(text):
        raise KeyError("a parser bug")

    async def call():
        return await ask_llm(LLMSettings(base_url="http://x"), [], broken, "test")

    with pytest.raises(ApplicationError) as caught:
        asyncio.run(ActivityEnvironment().run(call))
    assert caught.value.non_retryable


def test_an_embedding_reply_of_the_wrong_shape_means_no_vectors():
    for body in [
        '{"data": "abc"}',
        '{"data": [1, 2]}',
        "[" * 50_000 + "]" * 50_000,
        '{"data": [{"embedding": [1e400]}]}',
    ]:
        client = EmbeddingClient(
            EmbeddingSettings(base_url="http://127.0.0.1:9/v1"),
            transport=httpx.MockTransport(lambda r, b=body: httpx.Response(200, content=b)),
        )
        assert client.embed(["text"], retries=0) == [None]


# -- the vocabulary file ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["deep", "fifo", "link-to-fifo", "category-slash"])
def test_a_bad_vocabulary_file_means_the_builtin_list(tmp_path, kind):
    root = tmp_path / "agents" / "a1"
    root.mkdir(parents=True)
    path = root / FILE_NAME
    if kind == "deep":  # it raised RecursionError and failed the whole dream
        path.write_text('{"extraCommonWords": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-to-fifo":
        os.mkfifo(root / "pipe")
        path.symlink_to(root / "pipe")
    else:  # "/" became "" and exempted every category from the numeric check
        path.write_text(json.dumps({"numericExemptCategories": ["/"]}))
    with deadline(10):
        loaded = load_vocabulary(FileDocuments(AgentFiles(tmp_path, "a1")))
    assert loaded.source == "built-in baseline" and loaded.warning


# -- the clusters file, the conversation log, working and conversation files ----------------


@pytest.mark.parametrize(
    "record",
    [
        {"members": ["a", "b"], "declines": 1, "settledAt": "9999-12-31T00:00:00+00:00"},
        {"members": ["a", "b"], "declines": 10**9, "settledAt": "2025-12-01T00:00:00+00:00"},
        {"members": [1, ["x"]], "declines": 1, "settledAt": "2025-12-01T00:00:00+00:00"},
        {"members": ["a", "b"], "declines": 1, "settledAt": "0001-01-01T00:00:00+05:00"},
    ],
)
def test_a_hostile_clusters_record_never_fails_gating(tmp_path, record):
    state = ClusterState(FileDocuments(AgentFiles(tmp_path, "a1")))
    path = tmp_path / "agents" / "a1" / "consolidation" / "clusters.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"clusters": [record]}))
    settled = state.load()
    gate([], settled, T0)  # settled_at + delay overflowed; 2**declines overflowed


def test_reopen_delay_is_capped_before_it_can_overflow():
    assert reopen_delay(10**9) == reopen_delay(10)
    gate([], {"k": SettledCluster(("a", "b"), 3, datetime.max.replace(tzinfo=UTC))}, T0)


def test_a_deep_conversation_log_line_is_skipped(tmp_path):
    path = tmp_path / "agents" / "a1" / "conversation-log" / "turns.jsonl"
    path.parent.mkdir(parents=True)
    good = {"sessionId": "s1", "role": "user", "content": "hi", "at": "2026-01-01T00:00:00Z"}
    path.write_text(
        "[" * 100_000
        + "]" * 100_000
        + "\n"
        + json.dumps({**good, "at": "0001-01-01T00:00:00+05:00"})
        + "\n"
        + json.dumps(good)
        + "\n"
    )
    log = ConversationLog(FileDocuments(AgentFiles(tmp_path, "a1")))
    assert [t.content for t in log.read()] == ["hi"]


def test_naive_times_in_working_and_conversation_files_compare(tmp_path):
    root = tmp_path / "agents" / "a1"
    (root / "working-memory").mkdir(parents=True)
    (root / "working-memory" / "session.json").write_text(
        json.dumps(
            {
                "entries": [
                    {
                        "key": "session/s1/k",
                        "value": "v",
                        "storedAt": "2026-01-01T11:00:00",
                        "expiresAt": "2026-01-01T13:00:00",
                    },
                    {
                        "key": "patrol/x/k",
                        "value": "misplaced",
                        "storedAt": "2026-01-01T11:00:00",
                        "expiresAt": "2026-01-01T13:00:00",
                    },
                ]
            }
        )
    )
    (root / "working-memory" / "patrol.json").write_text('{"no": "entries"}')  # KeyError
    working = FileWorkingMemoryStore(tmp_path, "a1", clock=lambda: T0)
    assert [e.key for e in working.list().entries] == ["session/s1/k"]  # TypeError before
    (root / "conversations" / "sessions").mkdir(parents=True)
    (root / "conversations" / "sessions" / "s1.json").write_text(
        json.dumps(
            {
                "started_at": "2026-01-01T11:00:00",
                "last_at": "2026-01-01T11:59:00",
                "next_n": 2,
                "turns": [{"n": 1, "role": "user", "content": "hi", "at": "2026-01-01T11:59:00"}],
            }
        )
    )
    conversation = FileConversationStore(tmp_path, "a1", clock=lambda: T0).conversation("s1")
    assert [t.content for t in conversation.turns] == ["hi"]  # TypeError before


@pytest.mark.parametrize(
    "directory", ["working-memory", "conversations", "consolidation", "conversation-log"]
)
def test_a_linked_store_directory_is_never_written_through(tmp_path, directory):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "data" / "agents" / "a1"
    root.mkdir(parents=True)
    (root / directory).symlink_to(outside, target_is_directory=True)
    with contextlib.suppress(OSError, InvalidInput):
        FileWorkingMemoryStore(tmp_path / "data", "a1", clock=lambda: T0).save(
            "session/s1", "k", "v"
        )
    with contextlib.suppress(OSError, InvalidInput):
        FileConversationStore(tmp_path / "data", "a1", clock=lambda: T0).add_turn("s1", "user", "x")
    with contextlib.suppress(OSError):
        ClusterState(FileDocuments(AgentFiles(tmp_path / "data", "a1"))).save(
            [SettledCluster(("a", "b"), 1, T0)]
        )
    assert list(outside.iterdir()) == []


# -- CLI and settings ---------------------------------------------------------------------


def _cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, err.getvalue()


def test_cli_refuses_what_it_used_to_crash_on_or_misdirect(tmp_path):
    data = str(tmp_path / "data")
    assert _cli("--data", data, "--agent", "a1", "save", "--direct", "seed")[0] == 0
    before = tree_snapshot(tmp_path)
    for argv in [
        ("--data", data, "--agent", "a1", "save", "--direct", "bad \udcff text"),  # exit 1
        (
            "--data",
            data,
            "--agent",
            "a1",
            "search",
            "x",
            "--created-after",
            "0001-01-01T00:00:00+05:00",
        ),  # OverflowError, exit 1
        ("--data", data, "--agent", "", "save", "--direct", "to agent 'default'"),
        ("--data", "", "--agent", "a1", "save", "--direct", "to ./.dreamkeeper"),
        ("--data", data, "--agent", "a1", "purge", "--retention-days", "99999999999"),
    ]:
        code, err = _cli(*argv)
        assert code == 2 and err.count("\n") == 1, (argv, err)
    assert tree_snapshot(tmp_path) == before
    assert _cli("--help")[0] == 0  # raised SystemExit out of main()


def test_settings_raise_settings_errors_only():
    with pytest.raises(SettingsError):
        TemporalSettings.from_env({"TEMPORAL_ADDRESS": "host:²"})  # int() raised ValueError
    for value in ("nan", "-1", "inf", "abc"):
        with pytest.raises(InvalidInput):
            LLMSettings.from_env({"DREAMKEEPER_LLM_TIMEOUT_SECONDS": value})
    assert LLMSettings.from_env({"DREAMKEEPER_LLM_TIMEOUT_SECONDS": " "}).timeout_seconds == 60


def test_working_memory_refuses_to_write_a_segment_its_reader_would_refuse(tmp_path, monkeypatch):
    from dreamkeeper.stores.files import working_memory

    monkeypatch.setattr(working_memory, "MAX_SEGMENT_FILE_BYTES", 2_000)
    memory = FileWorkingMemoryStore(tmp_path, "a1", clock=lambda: T0)
    memory.save("session/s1", "a", "x" * 1_000)
    with pytest.raises(InvalidInput):
        memory.save("session/s1", "b", "y" * 1_500)
    assert [e.key for e in memory.list().entries] == ["session/s1/a"]
