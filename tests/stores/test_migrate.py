"""`migrate`: a generated file store copied into another backend (a database, and a
second data directory, which runs the same code), verified by counts and content hashes;
killed between agents by a crash point and re-run, with nothing duplicated."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from dreamkeeper.stores.contract.backend import StoreBackend
from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.faults import (
    BATCH_HALF_WRITTEN,
    MIGRATE_AGENT_COPIED,
    TRANSACTION_OPEN,
    SimulatedCrash,
    armed,
)
from dreamkeeper.stores.files.backend import FileBackend
from dreamkeeper.stores.migrate import content_digest, migrate
from dreamkeeper.stores.postgres.backend import PostgresBackend

WORDS = "deploy window friday rollback canary latency budget owner pager runbook".split()


def generated_store(root, seed: int = 7, agents: int = 3) -> FileBackend:
    """Agents with live and archived entries, working memory (a stash too) and sessions."""
    rng = random.Random(seed)
    source = FileBackend(root)
    for n in range(agents):
        agent = f"agent-{n}"
        store = source.memory(agent)
        made = store.create_many(
            NewEntry(
                " ".join(rng.choices(WORDS, k=rng.randint(3, 12))) + f" #{n}-{i}",
                category=rng.choice([None, "ops", "people"]),
                tags=tuple(rng.sample(WORDS, rng.randint(0, 3))),
                importance=round(rng.random(), 2),
            )
            for i in range(rng.randint(20, 60))
        )
        for entry in rng.sample(made, len(made) // 5):
            store.archive(entry.id, "generated")
        working = source.working(agent)
        working.save("session/s1", "plan", "ship on friday", ttl=timedelta(hours=1))
        working.save("patrol/p1", "seen", "the canary", ttl=timedelta(hours=2), tags=["ops"])
        working.put_stash("stash/run1/call1", "a tool result", ttl=timedelta(hours=1), tags=[])
        talk = source.conversations(agent)
        for t in range(rng.randint(2, 6)):
            talk.add_turn("s1", "user" if t % 2 == 0 else "assistant", f"turn {t} of {agent}")
    return source


@pytest.fixture(params=["file", "postgres"])
def target(request, tmp_path) -> StoreBackend:
    if request.param == "file":
        return FileBackend(tmp_path / "target")
    return PostgresBackend(request.getfixturevalue("database_url"))


def _state(backend: StoreBackend, agent: str) -> tuple:
    entries = backend.memory(agent).entries(include_archived=True)
    working = sorted(
        (e.key, e.value, e.category, tuple(e.tags))
        for e in backend.working(agent).list(cap=1_000).entries
    )
    turns = [(t.role, t.content) for t in backend.conversations(agent).conversation("s1").turns]
    return len(entries), content_digest(entries), working, turns


def test_everything_is_copied_and_verified(tmp_path, target):
    source = generated_store(tmp_path / "source")
    seen: list[tuple[int, int, str]] = []
    report = migrate(source, target, progress=lambda d, t, c: seen.append((d, t, c.agent_id)))
    assert report.verified and report.mismatches == []
    assert seen == [(1, 3, "agent-0"), (2, 3, "agent-1"), (3, 3, "agent-2")]
    assert target.agents() == source.agents()
    for agent in source.agents():
        assert _state(target, agent) == _state(source, agent)
        archived = {e.id for e in source.memory(agent).archived()}
        assert archived and {e.id for e in target.memory(agent).archived()} == archived
    assert report.created == report.entries  # all new the first time


def test_a_run_killed_between_agents_completes_on_a_rerun_without_duplicates(tmp_path, target):
    source = generated_store(tmp_path / "source")
    with armed(MIGRATE_AGENT_COPIED, after=1), pytest.raises(SimulatedCrash):
        migrate(source, target)  # dies after the second agent
    assert target.agents() == ["agent-0", "agent-1"]
    again = migrate(source, target)
    assert again.verified
    assert [a.created for a in again.agents][:2] == [0, 0]  # already there: left alone
    assert again.agents[2].created == again.agents[2].entries
    for agent in source.agents():
        assert _state(target, agent) == _state(source, agent)  # no turn appended twice
    third = migrate(source, target)  # and once more: nothing changes
    assert third.verified and third.created == 0
    assert sum(a.turns for a in third.agents) == 0


def test_a_target_that_differs_is_reported_not_overwritten(tmp_path, target):
    source = generated_store(tmp_path / "source", agents=1)
    victim = source.memory("agent-0").entries()[0]
    target.memory("agent-0").create("other content under the same id", entry_id=victim.id)
    report = migrate(source, target)
    assert report.agents[0].conflicts == [victim.id]
    assert not report.verified and "content differs" in str(report.mismatches[0])
    assert target.memory("agent-0").require(victim.id).content == "other content under the same id"


def test_a_run_killed_inside_an_agents_bulk_import_completes_on_a_rerun(tmp_path, target):
    """Killed half way through writing an agent's entries (the backend's own crash point
    inside its bulk write): the re-run finds some entries there and copies the rest."""
    source = generated_store(tmp_path / "source", agents=2)
    point = BATCH_HALF_WRITTEN if isinstance(target, FileBackend) else TRANSACTION_OPEN
    with armed(point), pytest.raises(SimulatedCrash):
        migrate(source, target)
    again = migrate(source, target)  # each call opens the stores afresh, as a new process
    assert again.verified
    for agent in source.agents():
        assert _state(target, agent) == _state(source, agent)


async def test_the_data_directorys_payload_data_keys_are_carried_into_the_database(
    tmp_path, database_url
):
    """Payloads the data directory's workers sealed open on the database's workers after
    `migrate`; a key destroyed there (or whose forget was interrupted) stays erased; a
    key the database made meanwhile stays the agent's current one; a re-run adds nothing."""
    import os

    from dreamkeeper.client.codec import PayloadErased, PayloadKey, PayloadKeys, data_converter
    from dreamkeeper.stores.files.agent_keys import FileAgentKeyStore
    from dreamkeeper.stores.files.backend import FileBackend
    from dreamkeeper.stores.migrate import carry_agent_keys
    from dreamkeeper.stores.postgres.agent_keys import PostgresAgentKeyStore
    from dreamkeeper.stores.postgres.database import Database

    key = PayloadKey("k1", os.urandom(32))
    data = tmp_path / "data"
    on_files = data_converter(
        PayloadKeys((key,), "test", data_dir=data, key_store=FileBackend(data).agent_keys)
    )
    on_database = data_converter(
        PayloadKeys(
            (key,),
            "test",
            data_dir=tmp_path / "elsewhere",
            key_store=PostgresBackend(database_url).agent_keys,
        )
    )
    sealed = {
        agent: (await on_files.encode([{"agent_id": agent, "n": 1}]))[0]
        for agent in ("a1", "a2", "a3", "a4")
    }
    files = FileAgentKeyStore(data, [(key.key_id, key.secret)])
    files.destroy("a3")
    interrupted = files.current("a4")
    # A forget that died between listing the id and deleting the file.
    with (data / "agent-keys" / "destroyed.jsonl").open("a") as listed:
        listed.write(f'{{"keyId": "{interrupted.key_id}"}}\n')
    db = Database(database_url, max_size=2)
    try:
        keyring = tmp_path / "elsewhere" / "keyring"  # the database's processes share it
        already = PostgresAgentKeyStore(db, [(key.key_id, key.secret)], keyring).current("a2")
        first = carry_agent_keys(FileBackend(data), PostgresBackend(database_url))
        assert (first.keys, first.carried, first.destroyed, first.mismatches) == (3, 2, 2, [])
        again = carry_agent_keys(FileBackend(data), PostgresBackend(database_url))
        assert (again.keys, again.carried, again.destroyed, again.mismatches) == (3, 0, 0, [])
        with db.transaction() as conn:
            rows = conn.execute("SELECT wrapped, nonce FROM dreamkeeper_agent_keys").fetchall()
        assert all(files.current("a1").secret not in bytes(r[0]) for r in rows)
        assert PostgresAgentKeyStore(db, [(key.key_id, key.secret)], keyring).current("a2") == (
            already
        )
    finally:
        db.close()
    for agent in ("a1", "a2"):
        assert await on_database.decode([sealed[agent]]) == [{"agent_id": agent, "n": 1}]
    for agent in ("a3", "a4"):
        with pytest.raises(PayloadErased):
            await on_database.decode([sealed[agent]])


def _issue_tokens(source: FileBackend) -> dict[str, str]:
    from dreamkeeper.policies.access import Access
    from dreamkeeper.stores.tokens import issue, revoke

    tokens = source.tokens()
    secrets = {
        "write": issue(tokens, "bot", ["agent-0"], Access.WRITE)[1],
        "read": issue(tokens, "readers", ["agent-*"], Access.READ)[1],
        "admin": issue(tokens, "ops", [], Access.ADMIN)[1],
    }
    gone, secrets["revoked"] = issue(tokens, "gone", ["*"], Access.WRITE)
    revoke(tokens, gone.id)
    return secrets


def test_the_access_tokens_are_carried_and_verified(tmp_path, target):
    """Every token, revoked ones too, as stored: the same secrets work on the target, the
    revoked one does not, and the target is marked as a store that issued tokens. A
    revocation made after a first run is carried by the next; nothing is added twice."""
    from dreamkeeper.stores.tokens import revoke, verify

    source = generated_store(tmp_path / "source", agents=1)
    secrets = _issue_tokens(source)
    report = migrate(source, target)
    assert report.verified, report.tokens.mismatches
    assert (report.tokens.tokens, report.tokens.carried, report.tokens.issued) == (4, 4, True)
    held = target.tokens()
    assert held.snapshot().damage is None and held.issued()
    assert {r.id: r for r in held.all()} == {r.id: r for r in source.tokens().all()}
    for kind in ("write", "read", "admin"):
        assert verify(held, secrets[kind]) == verify(source.tokens(), secrets[kind]) is not None
    assert verify(held, secrets["revoked"]) is None
    write_id = secrets["write"].split("_")[1]
    revoke(source.tokens(), write_id)
    again = migrate(source, target)
    assert again.verified and (again.tokens.carried, again.tokens.revoked) == (0, 1)
    assert verify(target.tokens(), secrets["write"]) is None


def test_a_migration_killed_before_any_agent_leaves_the_target_closed(tmp_path, target):
    """Tokens (and the mark) go first: a target whose copy died after the first agent
    already refuses every caller without a token."""
    from dreamkeeper.stores.tokens import verify

    source = generated_store(tmp_path / "source", agents=2)
    secrets = _issue_tokens(source)
    with armed(MIGRATE_AGENT_COPIED), pytest.raises(SimulatedCrash):
        migrate(source, target)
    assert target.tokens().issued() and target.tokens().snapshot().damage is None
    assert verify(target.tokens(), secrets["read"]) is not None


def test_damaged_tokens_are_not_carried_and_the_target_never_starts_open(tmp_path, target):
    """A source whose token file is damaged: nothing of it is carried, the run reports
    the mismatch, and the target is marked and damaged, so no server starts open on it."""
    source = generated_store(tmp_path / "source", agents=1)
    _issue_tokens(source)
    (tmp_path / "source" / "access" / "tokens.json").write_text('{"version": 1, "tokens": []}')
    report = migrate(source, target)
    assert not report.verified
    assert "damaged" in report.tokens.mismatches[0] and report.tokens.carried == 0
    held = target.tokens()
    assert held.issued() and held.snapshot().damage is not None
