"""The key chain behind erasure on PostgreSQL (invariant 22, docs/storage.md): a forget
re-keys the agent (or deletes it with its keys) and rotates the key-encryption key, so a
destroyed data key's copies in the database's files can be opened by no key that remains;
a crash at any point of either leaves every surviving memory readable, and the retry
finishes; several hosts sharing the keyring learn of a rotation, and one with another
keyring is refused."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from dreamkeeper.client.agent_keys import data_key_aad
from dreamkeeper.core.forgetting import ForgetReceipt
from dreamkeeper.stores import faults
from dreamkeeper.stores.forget import Forgetting
from dreamkeeper.stores.postgres import keyring as keyring_module
from dreamkeeper.stores.postgres.agent_keys import PostgresAgentKeyStore
from dreamkeeper.stores.postgres.conversation_memory import PostgresConversationStore
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.documents import PostgresDocuments
from dreamkeeper.stores.postgres.forget import (
    AT_REST,
    NOT_SEALED,
    postgres_forgetting,
)
from dreamkeeper.stores.postgres.keyring import KeyringMismatch, _kek_aad
from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
from dreamkeeper.stores.postgres.sealing import Sealing
from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore

FACT = "Quillon Varga keeps the spare key under the blue heron statue."
KEPT = "Quillon likes green tea in the afternoon."
BYSTANDERS = ("b1", "b2", "b3")


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
    """Another process on the database (a pool, a keyring and caches of its own) sharing
    the keyring directory `keyring` (default: the deployment's)."""
    pools: list[Database] = []

    def make(keyring: Path | None = None) -> Sealing:
        own = Database(db.url, max_size=2)
        pools.append(own)
        return Sealing(PostgresAgentKeyStore(own, wrapping, keyring or tmp_path / "keyring"))

    yield make
    for pool in pools:
        pool.close()


def _world(db: Database, sealing: Sealing, agent: str) -> str:
    """An agent with something in every tier; the id of a fact to forget."""
    memory = PostgresMemoryStore(db, agent, sealing=sealing)
    fact = memory.create(FACT)
    memory.create(KEPT)
    memory.documents.append("dreams/c1.jsonl", b'{"note": "kept"}\n')
    PostgresWorkingMemoryStore(db, agent, sealing=sealing).save("session/s1", "k", "kept value")
    PostgresConversationStore(db, agent, sealing=sealing).add_turn("s1", "user", "kept turn")
    return fact.id


def _everything(db: Database, sealing: Sealing, agent: str) -> dict[str, Any]:
    """All an agent's stores hold, read by a fresh instance of each."""
    memory = PostgresMemoryStore(db, agent, sealing=sealing)
    return {
        "entries": sorted(e.content for e in memory.entries(include_archived=True)),
        "documents": PostgresDocuments(db, agent, sealing=sealing).read("dreams/c1.jsonl"),
        "working": [
            e.value for e in PostgresWorkingMemoryStore(db, agent, sealing=sealing).list().entries
        ],
        "turns": [
            t.content
            for t in PostgresConversationStore(db, agent, sealing=sealing).conversation("s1").turns
        ],
    }


def _key_rows(db: Database, agent: str) -> list[tuple[Any, ...]]:
    """The agent's data key rows as the heap and the WAL keep them: what is left of a
    destroyed key is exactly such a row."""
    with db.transaction() as conn:
        return conn.execute(
            "SELECT agent_id, key_id, kek_id, nonce, wrapped FROM dreamkeeper_agent_keys "
            "WHERE agent_id = %s",
            (agent,),
        ).fetchall()


def _keks_in_the_keyring(keyring: Path, wrapping: Any) -> list[AESGCM]:
    """Every key-encryption key the keyring file still holds, opened with the payload key."""
    found = []
    for path in keyring.glob("kek-*.json"):
        body = json.loads(path.read_bytes())
        for entry in body["keys"]:
            secret = AESGCM(dict(wrapping)[entry["wrappedBy"]]).decrypt(
                base64.b64decode(entry["nonce"]),
                base64.b64decode(entry["wrapped"]),
                _kek_aad(body["store"], entry["id"]),
            )
            found.append(AESGCM(secret))
    return found


def _opens(rows: list[tuple[Any, ...]], keks: list[AESGCM], wrapping: Any) -> bool:
    """Whether any of `keks` (or the payload key) unwraps any of these key rows."""
    for agent, key_id, _, nonce, wrapped in rows:
        for cipher in [*keks, *(AESGCM(secret) for _, secret in wrapping)]:
            try:
                cipher.decrypt(bytes(nonce), bytes(wrapped), data_key_aad(agent, key_id))
                return True
            except InvalidTag:
                continue
    return False


def _forgetting(db: Database, sealing: Sealing) -> Forgetting:
    return postgres_forgetting(db, sealing=sealing)


def test_a_forget_of_entries_re_keys_the_agent_and_rotates_the_key_chain(
    db, host, wrapping, tmp_path
):
    sealing = host()
    fact = _world(db, sealing, "a1")
    for agent in BYSTANDERS:
        _world(db, sealing, agent)
    before = {agent: _everything(db, host(), agent) for agent in BYSTANDERS}
    old_rows = _key_rows(db, "a1")
    bystander_key = _key_rows(db, "b1")[0][1]
    # What is left in the files of the key about to be destroyed opens now: the check
    # below can tell.
    assert _opens(old_rows, _keks_in_the_keyring(tmp_path / "keyring", wrapping), wrapping)

    receipt = _forgetting(db, sealing).forget_entries("a1", [fact])

    assert receipt.verified, receipt.verification
    assert receipt.sealed_at_rest and receipt.left_to_operator == [AT_REST]
    assert receipt.history_keys_destroyed == 1
    checked = " ".join(receipt.verification.checked)
    assert "sealed with its new data key" in checked and "erased from the keyring" in checked
    assert any(r.what == "retired key-encryption keys" and r.count == 1 for r in receipt.removed)
    # No key that remains opens the destroyed one's wrapped copy.
    assert not _opens(old_rows, _keks_in_the_keyring(tmp_path / "keyring", wrapping), wrapping)
    assert old_rows[0][1] not in {r[1] for r in _key_rows(db, "a1")}
    # Every other memory of the agent, and every other agent, reads as before.
    other = host()
    assert _everything(db, other, "a1")["entries"] == [KEPT]
    assert _everything(db, other, "a1")["working"] == ["kept value"]
    assert {agent: _everything(db, other, agent) for agent in BYSTANDERS} == before
    assert _key_rows(db, "b1")[0][1] == bystander_key  # re-wrapped, the same key
    with db.transaction() as conn:
        assert conn.execute("SELECT count(*) FROM dreamkeeper_keks").fetchone()[0] == 1


def test_a_forget_without_a_payload_key_says_the_database_may_still_hold_the_text(db):
    memory = PostgresMemoryStore(db, "a1")
    fact = memory.create(FACT)
    receipt = postgres_forgetting(db).forget_entries("a1", [fact.id])
    assert receipt.verified and receipt.sealed_at_rest is False
    assert receipt.left_to_operator == [NOT_SEALED]
    assert "may still hold the forgotten text" in NOT_SEALED
    assert "entry files" not in receipt.model_dump_json()


ENTRY_POINTS = [
    faults.AGENT_KEY_ROTATED,
    faults.ROWS_HALF_RESEALED,
    faults.KEK_WRITTEN,
    faults.KEK_LISTED,
    faults.KEYS_HALF_REWRAPPED,
    faults.KEK_RETIRED,
]
AGENT_POINTS = [
    faults.KEK_WRITTEN,
    faults.KEK_LISTED,
    faults.KEYS_HALF_REWRAPPED,
    faults.KEK_RETIRED,
]


@pytest.mark.parametrize(
    "scope, point",
    [("entries", p) for p in ENTRY_POINTS] + [("agent", p) for p in AGENT_POINTS],
)
def test_a_crash_anywhere_in_the_re_key_or_the_rotation_loses_no_memory_and_is_finished(
    db, host, wrapping, tmp_path, monkeypatch, scope, point
):
    monkeypatch.setattr(keyring_module, "REWRAP_CHUNK", 1)  # "half": after the first key
    sealing = host()
    fact = _world(db, sealing, "a1")
    for agent in BYSTANDERS:
        _world(db, sealing, agent)
    before = {agent: _everything(db, host(), agent) for agent in BYSTANDERS}
    kept_before = _everything(db, host(), "a1")
    old_rows = _key_rows(db, "a1")

    with faults.armed(point), pytest.raises(faults.SimulatedCrash):
        if scope == "agent":
            _forgetting(db, sealing).forget_agent("a1")
        else:
            _forgetting(db, sealing).forget_entries("a1", [fact])

    # Another process, right after the crash: every surviving memory reads.
    after_crash = host()
    assert {agent: _everything(db, after_crash, agent) for agent in BYSTANDERS} == before
    # A KEK the cut-short rotation had retired is gone from the file once any process
    # has loaded it; one it never listed stays for the next rotation.
    in_file = set(after_crash.keys.keyring.held())
    with db.transaction() as conn:
        retired = {r[0] for r in conn.execute("SELECT kek_id FROM dreamkeeper_retired_keks")}
        listed = {r[0] for r in conn.execute("SELECT kek_id FROM dreamkeeper_keks")}
    assert not in_file & retired
    assert listed <= in_file and (point != faults.KEK_WRITTEN or len(in_file - listed) == 1)
    if scope == "entries":
        survivors = _everything(db, after_crash, "a1")
        assert survivors["entries"] in (kept_before["entries"], [KEPT])
        assert {k: v for k, v in survivors.items() if k != "entries"} == {
            k: v for k, v in kept_before.items() if k != "entries"
        }

    # The next forget (of anything) finishes it first.
    finisher = host()
    assert len(_forgetting(db, finisher).finish_pending()) == 1
    assert not _opens(old_rows, _keks_in_the_keyring(tmp_path / "keyring", wrapping), wrapping)
    with db.transaction() as conn:
        assert conn.execute("SELECT count(*) FROM dreamkeeper_keks").fetchone()[0] == 1
        stray = conn.execute(
            "SELECT count(*) FROM dreamkeeper_agent_keys WHERE kek_id IS DISTINCT FROM "
            "(SELECT kek_id FROM dreamkeeper_keks)"
        ).fetchone()[0]
    assert stray == 0
    last = host()
    assert {agent: _everything(db, last, agent) for agent in BYSTANDERS} == before
    if scope == "entries":
        assert _everything(db, last, "a1")["entries"] == [KEPT]
        assert _everything(db, last, "a1")["turns"] == ["kept turn"]
    else:
        assert _everything(db, last, "a1")["entries"] == []


def test_hosts_sharing_the_keyring_follow_a_rotation_and_another_keyring_is_refused(
    db, host, wrapping, tmp_path
):
    a, b = host(), host()
    fact = _world(db, a, "a1")
    _world(db, a, "b1")
    assert _everything(db, b, "b1")["entries"]  # b holds the first KEK in memory now
    _forgetting(db, a).forget_entries("a1", [fact])  # a rotates the chain
    with db.transaction() as conn:
        [(current,)] = conn.execute("SELECT kek_id FROM dreamkeeper_keks").fetchall()
    # b: a new agent's key is wrapped by the current KEK (read again from the file) ...
    PostgresMemoryStore(db, "n1", sealing=b).create("a new agent")
    assert {r[2] for r in _key_rows(db, "n1")} == {current}
    # ... and every existing key opens, wrapped by a KEK b had never seen.
    fresh_b = Sealing(b.keys)
    assert _everything(db, fresh_b, "b1")["entries"]
    assert _everything(db, fresh_b, "a1")["entries"] == [KEPT]
    # A host whose keyring is another directory cannot open them, and says why.
    stranger = host(keyring=tmp_path / "not-shared")
    with pytest.raises(KeyringMismatch, match="DREAMKEEPER_KEYRING") as refused:
        PostgresMemoryStore(db, "b1", sealing=stranger).entries()
    assert str(tmp_path / "not-shared") in str(refused.value)


def test_a_writer_holding_a_key_the_agent_moved_from_writes_with_the_current_one(db, host):
    """A process that saw the agent's key before a re-key began (cached) writes
    documents, memories, working memory and turns meanwhile: each lands sealed with the
    current key, so the re-key's retirement of the old one goes through."""
    a, b = host(), host()
    fact = _world(db, a, "a1")
    b.current("a1")  # b's view of the current key
    moved_to = a.keys.rotate("a1")  # a re-key has begun (the agent's key moved on)
    PostgresDocuments(db, "a1", sealing=b).append("dreams/c1.jsonl", b'{"late": 1}\n')
    with db.transaction() as conn:
        late = conn.execute(
            "SELECT key_id FROM dreamkeeper_documents WHERE agent_id = 'a1' "
            "ORDER BY seq DESC LIMIT 1"
        ).fetchone()
    assert late == (moved_to.key_id,)  # sealed with the current key, not b's
    receipt = _forgetting(db, a).forget_entries("a1", [fact])
    assert receipt.verified, receipt.verification
    documents = PostgresDocuments(db, "a1", sealing=host()).read("dreams/c1.jsonl")
    assert documents == b'{"note": "kept"}\n{"late": 1}\n'
    # After a whole-agent forget, b's stale key is never written with.
    _forgetting(db, a).forget_agent("a1")
    PostgresWorkingMemoryStore(db, "a1", sealing=b).save("session/s1", "k", "again")
    PostgresConversationStore(db, "a1", sealing=b).add_turn("s2", "user", "again")
    PostgresMemoryStore(db, "a1", sealing=b).create("again")
    PostgresDocuments(db, "a1", sealing=b).append("dreams/c2.jsonl", b"again\n")
    assert _everything(db, host(), "a1")["entries"] == ["again"]


def test_the_receipt_names_what_is_left_for_keys_and_rows_from_before_sealing(db, host):
    PostgresMemoryStore(db, "a1").create(f"old: {FACT}")  # before the payload key
    sealing = host()
    fact = PostgresMemoryStore(db, "a1", sealing=sealing).create(FACT)
    receipt: ForgetReceipt = _forgetting(db, sealing).forget_match("a1", "heron")
    assert receipt.verified and fact.id in receipt.entries and len(receipt.entries) == 2
    notes = " ".join(receipt.left_to_operator)
    assert "written in plaintext before" in notes and "VACUUM" in notes


def test_a_process_with_another_keyring_or_no_payload_key_is_refused_at_start(
    db, host, wrapping, tmp_path, monkeypatch
):
    """`dreamkeeper worker`, `serve` and `dev` check the backend before anything starts."""
    from dreamkeeper.stores.postgres.backend import PostgresBackend
    from dreamkeeper.stores.postgres.sealing import SealedWithoutKey

    PostgresMemoryStore(db, "a1", sealing=host()).create(FACT)  # the database seals now
    key_id, secret = wrapping[0]
    monkeypatch.setenv("DREAMKEEPER_PAYLOAD_KEY", f"{key_id}:{base64.b64encode(secret).decode()}")
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY_FILE", raising=False)
    monkeypatch.setenv("DREAMKEEPER_KEYRING", str(tmp_path / "keyring"))
    PostgresBackend(db.url, tmp_path / "host-a").check_ready()  # the deployment's keyring
    monkeypatch.setenv("DREAMKEEPER_KEYRING", str(tmp_path / "elsewhere"))
    with pytest.raises(KeyringMismatch) as refused:
        PostgresBackend(db.url, tmp_path / "host-b").check_ready()
    assert str(tmp_path / "elsewhere") in str(refused.value) and db.location in str(refused.value)
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY")
    monkeypatch.delenv("DREAMKEEPER_KEYRING")
    with pytest.raises(SealedWithoutKey, match="no payload key"):
        PostgresBackend(db.url, tmp_path / "host-c").check_ready()


def test_a_row_sealed_with_the_key_while_the_whole_agent_goes_is_deleted_too(db, host, monkeypatch):
    """A document appended (another process) after the forget emptied its table but
    before the keys go: the key's deletion is refused by the foreign key, and the forget
    deletes everything again."""
    from dreamkeeper.stores.postgres import forget as forget_module

    sealing = host()
    _world(db, sealing, "a1")
    writer = host()
    real = forget_module.destroy_keys
    calls = []

    def late_append_then_destroy(conn: Any, agent_id: str) -> list[str]:
        if not calls:
            PostgresDocuments(db, agent_id, sealing=writer).append("dreams/late.jsonl", b"x\n")
        calls.append(agent_id)
        return real(conn, agent_id)

    monkeypatch.setattr(forget_module, "destroy_keys", late_append_then_destroy)
    receipt = _forgetting(db, sealing).forget_agent("a1")
    assert len(calls) == 2 and receipt.verified, receipt.verification
    with db.transaction() as conn:
        assert conn.execute(
            "SELECT count(*) FROM dreamkeeper_documents WHERE agent_id = 'a1'"
        ).fetchone() == (0,)


def test_a_destroyed_key_leaves_the_memory_of_every_process(db, host, monkeypatch):
    """The process that runs the forget lets go of the keys it destroyed at once; another
    process that had opened one lets go within KEY_CACHE_SECONDS, and of a rotated-out
    key-encryption key within RELOAD_SECONDS."""
    from dreamkeeper.stores.postgres import sealing as sealing_module

    a, b = host(), host()
    fact = _world(db, a, "a1")
    assert _everything(db, b, "a1")["entries"]  # b holds a1's key now
    [old] = [r[1] for r in _key_rows(db, "a1")]
    [old_kek] = {r[2] for r in _key_rows(db, "a1")}
    assert old_kek in b.keys.keyring._keks

    def opened(process: Sealing) -> set[str]:
        return {key_id for (agent, key_id) in process._opened if agent == "a1"}

    assert old in opened(a) and old in opened(b)
    _forgetting(db, a).forget_entries("a1", [fact])
    assert old not in opened(a)
    later = sealing_module.monotonic() + sealing_module.KEY_CACHE_SECONDS + 1
    monkeypatch.setattr(sealing_module, "monotonic", lambda: later)
    monkeypatch.setattr(keyring_module, "monotonic", lambda: later)
    assert _everything(db, b, "a1")["entries"] == [KEPT]  # b reads on, with the new key
    assert old not in opened(b)
    assert old_kek not in b.keys.keyring._keks


def test_a_key_row_read_just_before_a_rotation_still_opens(db, host):
    """A process read a data key's row, then a rotation wrapped it by a new KEK and erased
    the old one from the keyring, then the process opens what it read."""
    a, b = host(), host()
    _world(db, a, "b1")
    fact = _world(db, a, "a1")
    stale = b.keys._current("b1")  # the row as b read it, wrapped by the first KEK
    assert stale is not None
    _forgetting(db, a).forget_entries("a1", [fact])  # the chain rotates
    assert b.keys._open("b1", stale).key_id == stale.key_id
