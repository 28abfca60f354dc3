"""`forget` on the file stores (invariant 22): every tier, the receipt, the verification,
derived entries, and a crash at each step finished by the next forget."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.forgetting import Removal
from dreamkeeper.policies.merge import MERGED_FROM
from dreamkeeper.stores import faults
from dreamkeeper.stores.contract.forgetting import AgentStores
from dreamkeeper.stores.dream_state.dream_ledger import DreamLedger
from dreamkeeper.stores.files.agent_files import AgentFiles
from dreamkeeper.stores.files.conversation_memory import FileConversationStore
from dreamkeeper.stores.files.forgetting import file_forgetting, file_stores
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore
from dreamkeeper.stores.forget import Forgetting
from dreamkeeper.stores.search.query import search

AGENT = "forget-me"
FACT = "Quillon Varga keeps the spare key under the blue heron statue at 4471 Marsh Lane."
OTHER = "The user prefers green tea in the afternoon."


class Keys:
    """A stand-in history key store: counts what it was asked to destroy."""

    def __init__(self) -> None:
        self.destroyed: list[str] = []

    def destroy(self, agent_id: str) -> int:
        self.destroyed.append(agent_id)
        return 1


def _grep(root: Path, text: str) -> list[str]:
    needle = text.lower().encode()
    found = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            if needle in path.read_bytes().lower():
                found.append(str(path.relative_to(root)))
    return found


def _world(tmp_path: Path) -> dict[str, str]:
    """A fact in every tier: an entry (with a vector file and a snapshot), merged into
    another with a second source, a dream ledger quoting it, working memory, a
    conversation turn (pushed into the archive) and the conversation log."""
    store = FileMemoryStore(tmp_path, AGENT)
    fact = store.create(FACT, category="people")
    other = store.create(OTHER, category="preferences")
    merged = store.create(
        f"{FACT} {OTHER}",
        metadata={MERGED_FROM: json.dumps([fact.id, other.id])},
    )
    files = AgentFiles(tmp_path, AGENT)
    DreamLedger(store.documents, "cycle1").note("merge", [(fact.id, fact), (other.id, other)])
    for source in (fact, other):
        assert store.retire_into(source.id, [merged.id], reason="merged").retired
    files.write(("memory", ".embeddings", f"{fact.id}.bin"), b"\0" * 16)
    assert store.save_snapshot()
    files.write(("index-snapshot.bin",), FACT.encode())  # a stale cache quoting it
    working = FileWorkingMemoryStore(tmp_path, AGENT)
    working.save("session/s1", "note", f"remember: {FACT}")
    working.save("session/s1", "unrelated", "buy milk")
    conversation = FileConversationStore(tmp_path, AGENT, max_retained=2)
    conversation.add_turn("s1", "user", f"By the way, {FACT}")
    conversation.add_turn("s1", "assistant", "Noted.")
    conversation.add_turn("s1", "user", "Thanks!")  # evicts the first turn to the archive
    return {"fact": fact.id, "other": other.id, "merged": merged.id}


def test_forget_an_entry_removes_it_from_every_tier_and_proves_it(tmp_path):
    ids = _world(tmp_path)
    assert len(_grep(tmp_path, FACT)) >= 6
    keys = Keys()
    forgetting = file_forgetting(tmp_path, history_keys=keys)

    receipt = forgetting.forget_entries(AGENT, [ids["fact"]], derived="forget")

    assert receipt.entries == [ids["fact"], ids["merged"]]
    assert receipt.derived == [ids["merged"]]
    assert receipt.restored == [ids["other"]]
    assert _grep(tmp_path, FACT) == []
    assert receipt.verified, receipt.verification
    assert receipt.verification.searches >= 2
    assert receipt.verification.files_scanned > 5
    places = {(r.place, r.what) for r in receipt.removed}
    root = f"agents/{AGENT}"
    assert (f"{root}/memory", "entry files") in places
    assert (f"{root}/memory/.embeddings", "vectors") in places
    assert (f"{root}/index-snapshot.bin", "cache file") in places
    assert (f"{root}/dreams/cycle1.jsonl", "ledger lines") in places
    assert (f"{root}/working-memory", "entries") in places
    assert (f"{root}/conversations/archive/s1.jsonl", "turns") in places
    assert (f"{root}/conversation-log/turns.jsonl", "turns") in places
    assert ("payload data keys", "Temporal history keys") in places
    assert keys.destroyed == [AGENT]
    # What was not about the fact stays: the second source is live again, the rest kept.
    store = FileMemoryStore(tmp_path, AGENT)
    assert [e.content for e in store.entries()] == [OTHER]
    assert search(store, "Quillon Varga heron", include_archived=True) == []
    assert FileWorkingMemoryStore(tmp_path, AGENT).get("session/s1/unrelated") is not None
    turns = FileConversationStore(tmp_path, AGENT).conversation("s1").turns
    assert [t.content for t in turns] == ["Noted.", "Thanks!"]
    # The receipt and the journal quote nothing.
    assert "Quillon" not in receipt.model_dump_json()
    assert _grep(tmp_path, "Quillon") == []


def test_derived_entries_are_reported_and_kept_by_default(tmp_path):
    ids = _world(tmp_path)
    receipt = file_forgetting(tmp_path).forget_entries(AGENT, [ids["fact"]])
    assert receipt.entries == [ids["fact"]]
    assert receipt.derived == [ids["merged"]]
    assert receipt.restored == []
    assert FileMemoryStore(tmp_path, AGENT).get(ids["merged"]) is not None
    # Honest: the merged entry still carries the text, and the proof says so.
    assert not receipt.verified
    assert any(ids["merged"] in p for p in receipt.verification.files_containing)


def test_forget_by_phrase_finds_archived_entries_and_scrubs_the_phrase(tmp_path):
    ids = _world(tmp_path)
    receipt = file_forgetting(tmp_path).forget_match(AGENT, "blue HERON statue", derived="forget")
    assert receipt.scope == "match"
    assert set(receipt.entries) == {ids["fact"], ids["merged"]}
    assert _grep(tmp_path, "blue heron statue") == []
    assert receipt.verified


def test_dry_run_changes_nothing(tmp_path):
    ids = _world(tmp_path)
    before = sorted(_grep(tmp_path, FACT))
    receipt = file_forgetting(tmp_path).forget_entries(
        AGENT, [ids["fact"]], derived="forget", dry_run=True
    )
    assert receipt.dry_run and receipt.entries == [ids["fact"], ids["merged"]]
    assert sorted(_grep(tmp_path, FACT)) == before


def test_forget_a_whole_agent(tmp_path):
    _world(tmp_path)
    FileMemoryStore(tmp_path, "someone-else").create(OTHER)
    keys = Keys()
    receipt = file_forgetting(tmp_path, history_keys=keys).forget_agent(AGENT)
    assert not (tmp_path / "agents" / AGENT).exists()
    assert receipt.verified and keys.destroyed == [AGENT]
    assert {r.place for r in receipt.removed} >= {
        f"agents/{AGENT}/memory",
        f"agents/{AGENT}/working-memory",
        f"agents/{AGENT}/conversations",
        f"agents/{AGENT}/dreams",
    }
    assert _grep(tmp_path, FACT) == []
    assert len(FileMemoryStore(tmp_path, "someone-else").entries()) == 1


@pytest.mark.parametrize(
    "point", [faults.FORGET_BEGUN, faults.FORGET_TIERS_SCRUBBED, faults.ERASE_JOURNALED]
)
def test_a_forget_that_crashed_is_finished_by_the_next(tmp_path, point):
    ids = _world(tmp_path)
    FileMemoryStore(tmp_path, "bystander").create(OTHER)
    with faults.armed(point), pytest.raises(faults.SimulatedCrash):
        file_forgetting(tmp_path).forget_entries(AGENT, [ids["fact"]], derived="forget")
    assert _grep(tmp_path, FACT) != []  # the crash left work to do
    journal = (tmp_path / "forget-journal.jsonl").read_text()
    assert "Quillon" not in journal and ids["fact"] in journal  # ids, never content

    # The next writer, forgetting something else entirely, finishes it first.
    later = file_forgetting(tmp_path).forget_match("bystander", "green tea")
    assert len(later.resumed) == 1
    assert _grep(tmp_path, FACT) == []
    store = FileMemoryStore(tmp_path, AGENT)
    assert [e.id for e in store.entries()] == [ids["other"]]
    assert file_forgetting(tmp_path).finish_pending() == []


def test_a_long_lived_reader_sees_the_erasure(tmp_path):
    ids = _world(tmp_path)
    reader = FileMemoryStore(tmp_path, AGENT)
    assert reader.get(ids["fact"]) is not None
    file_forgetting(tmp_path).forget_entries(AGENT, [ids["fact"]], derived="forget")
    assert reader.get(ids["fact"]) is None
    assert search(reader, "Quillon", include_archived=True) == []


def test_bad_requests_change_nothing(tmp_path):
    _world(tmp_path)
    forgetting = file_forgetting(tmp_path)
    before = sorted(_grep(tmp_path, FACT))
    for call in (
        lambda: forgetting.forget_entries(AGENT, []),
        lambda: forgetting.forget_entries(AGENT, ["../../etc"]),
        lambda: forgetting.forget_entries("../x", ["0123456789ab"]),
        lambda: forgetting.forget_match(AGENT, "  "),
        lambda: forgetting.forget_agent("a/b"),
    ):
        with pytest.raises(InvalidInput):
            call()
    assert sorted(_grep(tmp_path, FACT)) == before


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    secret=st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
        min_size=12,
        max_size=80,
    ).filter(lambda s: len(s.split()) >= 2 and s.strip() == s)
)
def test_any_saved_text_is_gone_byte_for_byte(tmp_path_factory, secret):
    data = tmp_path_factory.mktemp("any")
    store = FileMemoryStore(data, AGENT)
    entry = store.create(secret)
    store.create("an unrelated note about lunch")
    FileWorkingMemoryStore(data, AGENT).save("session/s", "k", secret, ttl=timedelta(hours=1))
    FileConversationStore(data, AGENT).add_turn("s", "user", secret)
    receipt = file_forgetting(data).forget_entries(AGENT, [entry.id])
    encodings = {
        secret.encode(),
        json.dumps(secret)[1:-1].encode(),
        json.dumps(secret, ensure_ascii=False)[1:-1].encode(),
    }
    for directory, _, names in os.walk(data):
        for name in names:
            raw = (Path(directory) / name).read_bytes()
            assert not any(e in raw for e in encodings), name
    assert receipt.verified


def test_derived_entries_are_rewritten_without_it_where_coverage_allows(tmp_path):
    ids = _world(tmp_path)
    store = FileMemoryStore(tmp_path, AGENT)
    # A second merge whose other source's specifics share the forgotten clause: a
    # rewrite would lose them, so it is refused and the entry reported, unchanged.
    third = store.create("Quillon Varga was born in Tromsø.")
    tangled = store.create(
        "Quillon Varga, born in Tromsø, keeps the spare key under the blue heron statue "
        "at 4471 Marsh Lane.",
        metadata={MERGED_FROM: json.dumps([ids["fact"], third.id])},
    )
    receipt = file_forgetting(tmp_path).forget_entries(AGENT, [ids["fact"]], derived="rewrite")
    assert receipt.rewritten == [ids["merged"]]
    assert set(receipt.derived) == {ids["merged"], tangled.id}
    merged = FileMemoryStore(tmp_path, AGENT).require(ids["merged"])
    assert merged.content == OTHER
    assert json.loads(merged.metadata[MERGED_FROM]) == [ids["other"]]
    assert FileMemoryStore(tmp_path, AGENT).require(tangled.id).content == tangled.content
    # Not verbatim anywhere, but the tangled entry keeps its information: not verified.
    assert receipt.verification.clean and receipt.kept_derived == [tangled.id]
    assert not receipt.verified


def test_a_long_lived_readers_snapshot_carries_no_term_of_an_erased_entry(tmp_path):
    ids = _world(tmp_path)
    reader = FileMemoryStore(tmp_path, AGENT)
    assert search(reader, "Quillon", include_archived=True)  # its index holds the terms
    file_forgetting(tmp_path).forget_entries(AGENT, [ids["fact"]], derived="forget")
    assert reader.save_snapshot()  # the worker's maintenance does this
    data = (tmp_path / "agents" / AGENT / "index-snapshot.bin").read_bytes().lower()
    assert b"quillon" not in data and b"heron" not in data
    assert search(FileMemoryStore(tmp_path, AGENT), "tea")  # and it is a working snapshot


# -- both backends -----------------------------------------------------------------------


@dataclass
class Env:
    """A forget target on one backend: its stores, its Forgetting, and a raw dump of
    every byte the backend keeps for the data (files, or every row of every table)."""

    kind: str
    stores: Callable[[str], AgentStores]
    forgetting: Callable[..., Forgetting]
    dump: Callable[[], bytes]


@pytest.fixture
def env(backend: str, tier_db: Any, sealing: Any, tmp_path: Path) -> Env:
    if tier_db is None:

        def dump_files() -> bytes:
            out = []
            for directory, _, names in os.walk(tmp_path):
                out += [(Path(directory) / n).read_bytes() for n in names]
            return b"\0".join(out).lower()

        return Env(
            "file",
            file_stores(tmp_path),
            lambda **kw: file_forgetting(tmp_path, **kw),
            dump_files,
        )
    from dreamkeeper.stores.postgres.forget import (
        AGENT_TABLES,
        postgres_forgetting,
        postgres_stores,
    )

    def opened(conn: Any) -> list[bytes]:
        """Sealed at rest: each sealed value as it opens with the keys the store has."""
        out = []
        for table, _, sealed in AGENT_TABLES:
            if sealed is None:
                continue
            rows = conn.execute(
                f"SELECT agent_id, key_id, {sealed[0]} FROM {table} "  # noqa: S608
                "WHERE key_id IS NOT NULL"
            ).fetchall()
            out += [sealing.open(a, k, sealed[1], v) for a, k, v in rows if v is not None]
        return out

    def dump_rows() -> bytes:
        out = []
        with tier_db.transaction() as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            ).fetchall()
            for (table,) in tables:
                rows = conn.execute(f"SELECT t::text FROM {table} t").fetchall()  # noqa: S608
                out += [str(r[0]).encode() for r in rows]
            # bytea columns (vectors, the index snapshot, documents) as their bytes
            binary = conn.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = 'public' AND data_type = 'bytea'"
            ).fetchall()
            for table, column in binary:
                rows = conn.execute(f"SELECT {column} FROM {table}").fetchall()  # noqa: S608
                out += [bytes(r[0]) for r in rows if r[0] is not None]
            if sealing is not None:
                out += opened(conn)
        return b"\0".join(out).lower()

    return Env(
        "postgres",
        postgres_stores(tier_db, sealing),
        lambda **kw: postgres_forgetting(tier_db, sealing=sealing, **kw),
        dump_rows,
    )


def _world_on(env: Env) -> dict[str, str]:
    """As `_world`, through the stores' own operations only."""
    stores = env.stores(AGENT)
    store = stores.memory
    fact = store.create(FACT, category="people")
    other = store.create(OTHER, category="preferences")
    merged = store.create(
        f"{FACT} {OTHER}",
        metadata={MERGED_FROM: json.dumps([fact.id, other.id])},
    )
    DreamLedger(store.documents, "cycle1").note("merge", [(fact.id, fact), (other.id, other)])
    for source in (fact, other):
        assert store.retire_into(source.id, [merged.id], reason="merged").retired
    assert store.save_snapshot()
    stores.working.save("session/s1", "note", f"remember: {FACT}")
    stores.working.save("session/s1", "unrelated", "buy milk")
    conversation = stores.conversation
    conversation.add_turn("s1", "user", f"By the way, {FACT}")
    conversation.add_turn("s1", "assistant", "Noted.")
    conversation.add_turn("s1", "user", "Thanks!")
    return {"fact": fact.id, "other": other.id, "merged": merged.id}


def test_forget_erases_every_tier_on_either_backend(env):
    ids = _world_on(env)
    assert b"quillon" in env.dump()
    keys = Keys()
    forgetting = env.forgetting(history_keys=keys)
    receipt = forgetting.forget_entries(AGENT, [ids["fact"]], derived="forget")
    assert receipt.entries == [ids["fact"], ids["merged"]]
    assert receipt.restored == [ids["other"]]
    assert receipt.verified, receipt.verification
    assert receipt.verification.files_scanned > 5
    assert b"quillon" not in env.dump() and b"heron" not in env.dump()
    whats = {r.what for r in receipt.removed}
    entries = "entry files" if env.kind == "file" else "entry rows"
    assert {entries, "ledger lines", "entries", "turns"} <= whats
    if env.kind == "postgres":  # rows, never files, on a database
        assert receipt.verification.scanned == "rows"
        assert not any("file" in r.what for r in receipt.removed)
    # Sealed at rest, the keys retired are the ones that sealed the rows (re-keyed).
    sealed = getattr(forgetting, "sealing", None) is not None
    assert keys.destroyed == ([] if sealed else [AGENT]) and receipt.history_keys_destroyed == 1
    stores = env.stores(AGENT)
    assert [e.content for e in stores.memory.entries()] == [OTHER]
    assert search(stores.memory, "Quillon Varga heron", include_archived=True) == []
    assert stores.working.get("session/s1/unrelated") is not None
    turns = stores.conversation.conversation("s1").turns
    assert [t.content for t in turns] == ["Noted.", "Thanks!"]
    assert "Quillon" not in receipt.model_dump_json()


def test_an_unforgotten_derived_entry_leaves_the_receipt_unverified_on_either_backend(env):
    ids = _world_on(env)
    receipt = env.forgetting().forget_entries(AGENT, [ids["fact"]])
    assert receipt.derived == [ids["merged"]]
    assert env.stores(AGENT).memory.get(ids["merged"]) is not None
    assert not receipt.verified and receipt.verification.files_containing


def test_a_dry_run_changes_nothing_on_either_backend(env):
    ids = _world_on(env)
    before = env.dump().count(b"quillon")
    receipt = env.forgetting().forget_match(AGENT, "blue heron", derived="forget", dry_run=True)
    assert receipt.dry_run and set(receipt.entries) == {ids["fact"], ids["merged"]}
    assert env.dump().count(b"quillon") == before


@pytest.mark.parametrize(
    "point", [faults.FORGET_BEGUN, faults.FORGET_TIERS_SCRUBBED, faults.ERASE_JOURNALED]
)
def test_a_crashed_forget_is_finished_by_the_next_on_either_backend(env, point):
    ids = _world_on(env)
    env.stores("bystander").memory.create(OTHER)
    with faults.armed(point), pytest.raises(faults.SimulatedCrash):
        env.forgetting().forget_entries(AGENT, [ids["fact"]], derived="forget")
    assert b"quillon" in env.dump()  # the crash left work to do
    later = env.forgetting().forget_match("bystander", "green tea")
    assert len(later.resumed) == 1
    assert b"quillon" not in env.dump()
    assert [e.id for e in env.stores(AGENT).memory.entries()] == [ids["other"]]
    assert env.forgetting().finish_pending() == []


@pytest.mark.parametrize(
    "point", [faults.FORGET_BEGUN, faults.FORGET_TIERS_SCRUBBED, faults.ERASE_JOURNALED]
)
def test_the_retry_of_a_crashed_request_reports_what_the_request_did(env, point):
    """The retry of the request a crash interrupted (the worker's, same caller id) finds
    its entries already gone or erases them itself: either way its receipt lists them,
    once, and does not list its own earlier attempt as another request resumed."""
    ids = _world_on(env)
    with faults.armed(point), pytest.raises(faults.SimulatedCrash):
        env.forgetting().forget_entries(AGENT, [ids["fact"]], derived="forget", caller="r-1")
    retry = env.forgetting().forget_entries(AGENT, [ids["fact"]], derived="forget", caller="r-1")
    assert retry.resumed == []
    assert set(retry.entries) == {ids["fact"], ids["merged"]}
    assert len(retry.entries) == len(set(retry.entries))
    erased = [r for r in retry.removed if r.what == env.forgetting().steps.entries_name]
    assert [r.count for r in erased] == [2]
    assert b"quillon" not in env.dump()


def test_another_request_id_still_lists_the_crashed_one_as_resumed(env):
    ids = _world_on(env)
    with faults.armed(faults.FORGET_TIERS_SCRUBBED), pytest.raises(faults.SimulatedCrash):
        env.forgetting().forget_entries(AGENT, [ids["fact"]], derived="forget", caller="r-1")
    other = env.forgetting().forget_match(AGENT, "green tea", caller="r-2")
    assert len(other.resumed) == 1 and ids["fact"] not in other.entries
    whole = env.forgetting().forget_agent(AGENT, caller="r-1")  # same id, another agent's
    assert whole.resumed == []  # nothing left pending


def test_a_long_lived_reader_snapshots_no_erased_term_on_either_backend(env):
    ids = _world_on(env)
    reader = env.stores(AGENT).memory
    assert search(reader, "Quillon", include_archived=True)  # its index holds the terms
    assert reader.save_snapshot()
    assert b"quillon" in env.dump()
    env.forgetting().forget_entries(AGENT, [ids["fact"]], derived="forget")
    assert reader.get(ids["fact"]) is None
    assert reader.save_snapshot()  # the worker's maintenance does this
    assert b"quillon" not in env.dump() and b"heron" not in env.dump()
    assert search(env.stores(AGENT).memory, "tea")


def test_forget_a_whole_agent_on_either_backend(env):
    _world_on(env)
    env.stores("someone-else").memory.create(OTHER)
    keys = Keys()
    forgetting = env.forgetting(history_keys=keys)
    receipt = forgetting.forget_agent(AGENT)
    # Sealed at rest, the history keys are the ones sealing the rows (the agent had one).
    sealed = getattr(forgetting, "sealing", None) is not None
    assert receipt.verified and keys.destroyed == ([] if sealed else [AGENT])
    assert receipt.history_keys_destroyed == 1
    # The receipt's tail, the same on both backends: the history keys last, nothing left.
    assert len(receipt.removed) > 1
    assert receipt.removed[-1] == Removal(
        place="payload data keys", what="Temporal history keys", count=1
    )
    assert receipt.verification.files_containing == []
    assert b"quillon" not in env.dump()
    assert len(env.stores("someone-else").memory.entries()) == 1
    assert env.stores(AGENT).memory.entries(include_archived=True) == []
