"""Memory content sealed at rest on PostgreSQL (invariant 22, docs/storage.md): with a
payload key, no table holds an agent's content or a working-memory key in plaintext, every
tier reads back exactly what was written, search ranks exactly as without sealing, a value
moved to another agent does not open, and a process without the key is refused rather than
let write plaintext."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.postgres.agent_keys import PostgresAgentKeyStore
from dreamkeeper.stores.postgres.conversation_memory import PostgresConversationStore
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
from dreamkeeper.stores.postgres.sealing import SealedWithoutKey, Sealing, sealing_for
from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore
from dreamkeeper.stores.search.query import search
from dreamkeeper.stores.vectors.vectors import encode_vector

MARKER = "Zorblax Quendrith"  # in every tier: content, a working-memory key, turns, documents
MARKER_KEY = "zorblax-quendrith"


@pytest.fixture
def db(database_url: str) -> Any:
    found = Database(database_url, max_size=4)
    yield found
    found.close()


@pytest.fixture
def wrapping() -> list[tuple[str, bytes]]:
    return [("pk1", os.urandom(32))]


@pytest.fixture
def host(db: Any, wrapping: Any, tmp_path: Path) -> Any:
    """A process with the payload key and the keyring every process on `db` shares; each
    call is another process (a pool and caches of its own)."""
    pools: list[Database] = []

    def make() -> Sealing:
        own = Database(db.url, max_size=2)
        pools.append(own)
        return Sealing(PostgresAgentKeyStore(own, wrapping, tmp_path / "keyring"))

    yield make
    for pool in pools:
        pool.close()


def raw_dump(db: Database) -> bytes:
    """Every row of every table as text, and every bytea value as its bytes, lower-cased:
    what anyone reading the tables (or a dump) gets."""
    out: list[bytes] = []
    with db.transaction() as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
        for (table,) in tables:
            out += [str(r[0]).encode() for r in conn.execute(f"SELECT t::text FROM {table} t")]
        binary = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND data_type = 'bytea'"
        ).fetchall()
        for table, column in binary:
            rows = conn.execute(f"SELECT {column} FROM {table}").fetchall()  # noqa: S608
            out += [bytes(r[0]) for r in rows if r[0] is not None]
    return b"\0".join(out).lower()


def forms(text: str) -> list[bytes]:
    lowered = text.lower()
    return [lowered.encode(), json.dumps(lowered)[1:-1].encode()]


def _world(db: Database, sealing: Sealing | None, agent: str, embedding_client: Any) -> dict:
    """The same writes on every tier, sealed or not (with fixed entry ids)."""
    memory = PostgresMemoryStore(db, agent, sealing=sealing, embeddings=embedding_client)
    first = memory.create(f"{MARKER} keeps bees in Tromsø", category="people", entry_id="a" * 12)
    memory.create("The deploy window is Friday at 14:00 UTC", entry_id="b" * 12)
    memory.create_many(
        [NewEntry(content=f"Batch fact {i} about {MARKER} and Oslo") for i in range(5)]
    )
    memory.mutate(
        first.id,
        lambda e: e.model_copy(update={"content": f"{MARKER} keeps bees and goats in Tromsø"}),
        reason="edited",
    )
    fresh = memory.get(first.id)
    assert fresh is not None
    assert memory.write_vector(first.id, np.linspace(0, 1, 8, dtype=np.float32), fresh.fingerprint)
    memory.archive("b" * 12, "outdated")
    assert memory.save_snapshot()
    memory.documents.write("dreams/c1.jsonl", f'{{"note": "{MARKER}"}}\n'.encode())
    memory.documents.append("dreams/c1.jsonl", f'{{"more": "{MARKER}"}}\n'.encode())
    memory.documents.rename("dreams/c1.jsonl", "dreams/c2.jsonl")
    working = PostgresWorkingMemoryStore(db, agent, sealing=sealing)
    working.save("session/s1", MARKER_KEY, f"remember {MARKER}")
    working.save("session/s1", "plain", "buy milk")
    working.save("patrol/p1", "alert", f"{MARKER} is at the door")
    conversation = PostgresConversationStore(db, agent, sealing=sealing)
    conversation.add_turn("s1", "user", f"Have you met {MARKER}?")
    conversation.add_turn("s1", "assistant", "Not yet.")
    return {"first": first.id}


def _read(db: Database, sealing: Sealing | None, agent: str, embedding_client: Any) -> dict:
    memory = PostgresMemoryStore(db, agent, sealing=sealing, embeddings=embedding_client)
    working = PostgresWorkingMemoryStore(db, agent, sealing=sealing)
    conversation = PostgresConversationStore(db, agent, sealing=sealing)
    return {
        "entries": sorted(
            (e.content, e.category, e.archived_at is not None, e.revision)
            for e in memory.entries(include_archived=True)
        ),
        "search": [
            (h.entry.content, round(h.score, 6))  # (ids differ: summation order may)
            for h in search(memory, f"{MARKER} bees Oslo", include_archived=True)
        ],
        "opened_from_snapshot": memory.opened_from_snapshot,
        "vector": memory.storage._read_vectors(["a" * 12]).get("a" * 12),
        "documents": memory.documents.read("dreams/c2.jsonl"),
        "gone": memory.documents.read("dreams/c1.jsonl"),
        "working": sorted((e.key, e.value) for e in working.list().entries),
        "working_search": [e.key for e, _ in working.search(MARKER)],
        "turns": [(t.role, t.content) for t in conversation.conversation("s1").turns],
        "feed": [(r.action, r.id) for r in memory.changes()],
    }


def test_every_tier_keeps_its_content_sealed_and_reads_it_back_as_without(
    db, host, embedding_client
):
    sealing = host()
    _world(db, sealing, "sealed", embedding_client)
    _world(db, None, "plain", embedding_client)
    dump = raw_dump(db)
    # The plaintext twin shows the check can see the marker where it is stored as is.
    assert all(form in dump for form in forms(MARKER))
    with db.transaction() as conn:
        conn.execute("DELETE FROM dk_memory_feed WHERE agent_id = 'plain'")
        for table in (
            "dk_memory",
            "dk_memory_vector",
            "dk_memory_cache",
            "dreamkeeper_documents",
            "dreamkeeper_working",
            "dreamkeeper_working_vectors",
            "dreamkeeper_conversation_turns",
            "dreamkeeper_conversation_sessions",
        ):
            conn.execute(f"DELETE FROM {table} WHERE agent_id = 'plain'")  # noqa: S608
    dump = raw_dump(db)
    for text in (MARKER, MARKER_KEY, "Tromsø", "bees", "buy milk", "Not yet", "people"):
        assert not any(form in dump for form in forms(text)), text

    # Another process, with the key, reads exactly what a plaintext store holds.
    _world(db, None, "plain", embedding_client)
    sealed = _read(db, host(), "sealed", embedding_client)
    plain = _read(db, None, "plain", embedding_client)
    model = embedding_client.model_key
    for part in ("entries", "search", "documents", "gone", "working", "working_search", "turns"):
        assert sealed[part] == plain[part], part
    assert sealed["opened_from_snapshot"] and plain["opened_from_snapshot"]
    assert sealed["vector"] == plain["vector"] is not None
    assert sealed["vector"] == encode_vector(
        np.linspace(0, 1, 8, dtype=np.float32),
        PostgresMemoryStore(db, "plain").get("a" * 12).fingerprint,  # type: ignore[union-attr]
        model,
    )
    assert [a for a, _ in sealed["feed"]] == [a for a, _ in plain["feed"]]
    assert JournalAction.EMBEDDED in [a for a, _ in sealed["feed"]]


def test_a_sealed_value_moved_to_another_agent_does_not_open(db, host):
    sealing = host()
    PostgresMemoryStore(db, "a1", sealing=sealing).create(MARKER, entry_id="c" * 12)
    PostgresMemoryStore(db, "a2", sealing=sealing).create("something else", entry_id="d" * 12)
    with db.transaction() as conn:
        conn.execute(
            "UPDATE dk_memory SET sealed = (SELECT sealed FROM dk_memory WHERE agent_id = 'a1') "
            "WHERE agent_id = 'a2'"
        )
    stolen = PostgresMemoryStore(db, "a2", sealing=host())
    assert stolen.entries() == []
    assert any("failed authentication" in why for why in stolen.problems().values())


def test_a_process_without_the_payload_key_is_refused_on_a_database_that_seals(
    db, host, monkeypatch
):
    PostgresMemoryStore(db, "a1", sealing=host()).create(MARKER)
    for name in ("DREAMKEEPER_PAYLOAD_KEY", "DREAMKEEPER_PAYLOAD_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    keyless = Database(db.url, max_size=1)
    try:
        with pytest.raises(SealedWithoutKey, match="no payload key"):
            sealing_for(keyless, None)
        # A store made without one anyway meets a sealed row: refused, never skipped.
        with pytest.raises(SealedWithoutKey):
            PostgresMemoryStore(keyless, "a1").entries()
        with pytest.raises(SealedWithoutKey):
            PostgresMemoryStore(keyless, "a1").create("would be plaintext")
    finally:
        keyless.close()
    with db.transaction() as conn:
        assert (
            conn.execute("SELECT count(*) FROM dk_memory WHERE doc IS NOT NULL").fetchone()[0] == 0
        )


def test_a_store_kept_in_plaintext_is_sealed_by_the_first_write_of_a_process_with_a_key(db, host):
    """An upgrade: a working-memory store and a session sealed whole by their next write;
    long-term rows as they are written (and all by the agent's next forget, see
    test_key_chain.py), every row readable throughout."""
    PostgresWorkingMemoryStore(db, "a1").save("session/s1", "old", f"old {MARKER}")
    PostgresConversationStore(db, "a1").add_turn("s1", "user", f"old {MARKER}")
    PostgresMemoryStore(db, "a1").create(f"old {MARKER}", entry_id="e" * 12)
    sealing = host()
    PostgresWorkingMemoryStore(db, "a1", sealing=sealing).save("session/s2", "new", "new value")
    PostgresConversationStore(db, "a1", sealing=sealing).add_turn("s1", "user", "new turn")
    PostgresMemoryStore(db, "a1", sealing=sealing).create("new fact", entry_id="f" * 12)
    with db.transaction() as conn:
        for table in ("dreamkeeper_working", "dreamkeeper_conversation_turns"):
            assert (
                conn.execute(f"SELECT count(*) FROM {table} WHERE key_id IS NULL").fetchone()[0]  # noqa: S608
                == 0
            ), table
        assert conn.execute("SELECT id FROM dk_memory WHERE key_id IS NULL").fetchall() == [
            ("e" * 12,)
        ]
    reader = host()
    working = PostgresWorkingMemoryStore(db, "a1", sealing=reader)
    assert sorted(e.value for e in working.list().entries) == ["new value", f"old {MARKER}"]
    turns = PostgresConversationStore(db, "a1", sealing=reader).conversation("s1").turns
    assert [t.content for t in turns] == [f"old {MARKER}", "new turn"]
    contents = {e.content for e in PostgresMemoryStore(db, "a1", sealing=reader).entries()}
    assert contents == {f"old {MARKER}", "new fact"}


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=st.text(
        alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=12, max_size=200
    ).filter(lambda t: len(set(t.strip())) >= 6)
)
def test_any_saved_text_is_never_in_the_tables_and_reads_back_exactly(db, host, text):
    needles = [form for form in forms(text.strip()) if len(form) >= 12]
    # A text the database holds already (a table's or a migration's own name, "working
    # memo...") proves nothing about sealing: only a text absent before it is saved can.
    before = raw_dump(db)
    assume(not any(form in before for form in needles))
    sealing = host()
    agent = f"h{os.urandom(4).hex()}"
    entry = PostgresMemoryStore(db, agent, sealing=sealing).create(text)
    PostgresWorkingMemoryStore(db, agent, sealing=sealing).save("session/s1", "k", text)
    PostgresConversationStore(db, agent, sealing=sealing).add_turn("s1", "user", text)
    dump = raw_dump(db)
    assert not any(form in dump for form in needles)
    other = host()
    assert PostgresMemoryStore(db, agent, sealing=other).get(entry.id).content == entry.content  # type: ignore[union-attr]
    assert PostgresWorkingMemoryStore(db, agent, sealing=other).get("session/s1/k").value == text  # type: ignore[union-attr]
    turns = PostgresConversationStore(db, agent, sealing=other).conversation("s1").turns
    assert [t.content for t in turns] == [text]
