"""Per-agent data keys (client/agent_keys.py) in the payload codec: a payload naming an
agent is sealed with that agent's key; destroying the key makes it undecodable by any
key the system still has, with a clear message; payload-key rotation keeps working.

Every behaviour runs on both key stores: files under the data directory and rows in the
database (stores/postgres/agent_keys.py). On the database, each `PayloadKeys` gets a pool
of its own, as a worker on another host would."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payloads
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import WorkflowSerializationContext

from dreamkeeper.client.agent_keys import (
    AgentKeyErased,
    AgentKeyError,
    AgentKeyStore,
    FileAgentKeyStore,
    Wrapping,
)
from dreamkeeper.client.codec import (
    AGENT,
    FORGOTTEN,
    FORGOTTEN_KEY_ID,
    KEY_ID,
    EncryptionCodec,
    PayloadErased,
    PayloadKey,
    PayloadKeyMismatch,
    PayloadKeys,
    data_converter,
    derived_key_id,
)
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.payloads import SaveInput
from dreamkeeper.service.codec_server import make_server

SECRET = "Quillon Varga keeps the spare key under the blue heron statue."


def _key() -> PayloadKey:
    secret = os.urandom(32)
    return PayloadKey(derived_key_id(secret), secret)


def _save(agent: str = "a1") -> SaveInput:
    return SaveInput(
        agent_id=agent,
        entry_id="0123456789ab",
        content=SECRET,
        category="people",
        tags=[],
        source="user",
        importance=0.5,
    )


class KeyPlace:
    """Where a test's data keys live: the data directory, or a database."""

    def __init__(self, kind: str, data: Path, url: str | None) -> None:
        self.kind, self.data, self.url = kind, data, url
        self._pools: list[Any] = []

    def store(self, wrapping: Wrapping, data_dir: Path | None = None) -> AgentKeyStore:
        """A store instance of its own (on the database: its own pool, another host that
        shares the keyring directory)."""
        if self.url is None:
            return FileAgentKeyStore(self.data, wrapping)
        from dreamkeeper.stores.postgres.agent_keys import PostgresAgentKeyStore
        from dreamkeeper.stores.postgres.database import Database

        db = Database(self.url, max_size=2)
        self._pools.append(db)
        return PostgresAgentKeyStore(db, wrapping, self.data / "keyring")

    def keys(self, *keys: PayloadKey) -> PayloadKeys:
        if self.url is None:
            return PayloadKeys(tuple(keys), "test", data_dir=self.data)
        return PayloadKeys(tuple(keys), "test", data_dir=self.data, key_store=self.store)

    def stored_bytes(self) -> bytes:
        """Everything the key store keeps, as bytes."""
        if self.url is None:
            root = self.data / "agent-keys"
            return (
                b"".join(p.read_bytes() for p in sorted(root.iterdir())) if root.exists() else b""
            )
        rows = self._fetch(
            "SELECT agent_id, key_id, wrapped_by, nonce, wrapped FROM dreamkeeper_agent_keys"
        ) + self._fetch("SELECT key_id, destroyed_at::text FROM dreamkeeper_destroyed_keys")
        return b"".join(v if isinstance(v, bytes) else str(v).encode() for r in rows for v in r)

    def destroyed_list(self) -> str:
        if self.url is None:
            return (self.data / "agent-keys" / "destroyed.jsonl").read_text()
        return repr(self._fetch("SELECT * FROM dreamkeeper_destroyed_keys"))

    def agents_with_keys(self) -> set[str]:
        if self.url is None:
            root = self.data / "agent-keys"
            return {p.stem for p in root.glob("*.json")} if root.exists() else set()
        return {str(r[0]) for r in self._fetch("SELECT agent_id FROM dreamkeeper_agent_keys")}

    def _fetch(self, sql: str) -> list[tuple[Any, ...]]:
        from dreamkeeper.stores.postgres.database import Database

        db = Database(str(self.url), max_size=1)
        try:
            with db.transaction() as conn:
                return [
                    tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)
                    for row in conn.execute(sql).fetchall()
                ]
        finally:
            db.close()

    def close(self) -> None:
        for db in self._pools:
            db.close()


@pytest.fixture(params=["file", "postgres"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KeyPlace]:
    url = request.getfixturevalue("database_url") if request.param == "postgres" else None
    found = KeyPlace(str(request.param), tmp_path, url)
    yield found
    found.close()


def _wrapping(key: PayloadKey) -> Wrapping:
    return [(key.key_id, key.secret)]


async def test_a_payload_naming_an_agent_is_sealed_with_its_data_key(place):
    payload_key = _key()
    converter = data_converter(place.keys(payload_key))
    [sealed] = await converter.encode([_save()])
    assert sealed.metadata[AGENT] == b"a1"
    data_key = place.store(_wrapping(payload_key)).current("a1")
    assert sealed.metadata[KEY_ID] == data_key.key_id.encode()
    assert SECRET.encode() not in sealed.SerializeToString()
    stored = place.stored_bytes()
    assert data_key.key_id.encode() in stored  # it is there, only ever wrapped
    assert SECRET.encode() not in stored
    assert data_key.secret not in stored
    [back] = await converter.decode([sealed], [SaveInput])
    assert back == _save()
    # Another agent gets another key.
    [other] = await converter.encode([_save("b2")])
    assert other.metadata[KEY_ID] != sealed.metadata[KEY_ID]


def test_a_result_naming_no_agent_is_sealed_with_its_workflows_agent(place):
    keys = place.keys(_key())
    codec = EncryptionCodec(keys.keys, keys.agent_keys())
    bound = codec.with_context(WorkflowSerializationContext(namespace="default", workflow_id="w1"))
    payloads = pydantic_data_converter.payload_converter.to_payloads([_save(), "a plain result"])
    sealed = bound.encode_sync(payloads)
    assert sealed[0].metadata[AGENT] == b"a1"
    assert sealed[1].metadata[AGENT] == b"a1"  # learned from the workflow's input
    unbound = codec.encode_sync(payloads[1:])
    assert AGENT not in unbound[0].metadata  # no agent known: the payload key seals it


async def test_destroying_the_key_makes_its_payloads_undecodable_everywhere(place):
    payload_key = _key()
    converter = data_converter(place.keys(payload_key))
    [sealed] = await converter.encode([_save()])
    assert place.store(_wrapping(payload_key)).destroy("a1") == 1
    # The same process (a file cache notices the file went) and a fresh one refuse it.
    for fresh in (converter, data_converter(place.keys(payload_key))):
        with pytest.raises(
            PayloadErased, match="destroyed when the agent's memories were forgotten"
        ):
            await fresh.decode([sealed], [SaveInput])
    # No key the system has opens it: the payload key itself, as a plain key, fails too.
    with pytest.raises(PayloadKeyMismatch):
        await data_converter(PayloadKeys((payload_key,), "no data dir")).decode([sealed])
    assert "a1" not in place.agents_with_keys(), "no copy of the key is left"
    # The agent's next payload gets a new key and decodes.
    [again] = await converter.encode([_save()])
    assert again.metadata[KEY_ID] != sealed.metadata[KEY_ID]
    assert (await converter.decode([again], [SaveInput])) == [_save()]


async def test_rotating_the_payload_key_keeps_data_keys_working(place):
    old, new = _key(), _key()
    [sealed] = await data_converter(place.keys(old)).encode([_save()])
    rotated = data_converter(place.keys(new, old))  # new seals, old only opens
    assert (await rotated.decode([sealed], [SaveInput])) == [_save()]
    [later] = await rotated.encode([_save()])
    assert (await rotated.decode([later], [SaveInput])) == [_save()]
    # Without the old key the wrapped data key cannot be opened: a clear mismatch.
    with pytest.raises(PayloadKeyMismatch, match="decode-only"):
        await data_converter(place.keys(new)).decode([sealed], [SaveInput])


def test_the_codec_server_answers_an_erased_payload_with_a_placeholder_saying_so(place):
    """The Temporal UI shows a codec server's non-200 as a banner over the whole page: a
    forgotten agent's payload decodes to a plain string saying it was forgotten (marked
    in its metadata), and the rest of the request decodes as before."""
    payload_key = _key()
    keys = place.keys(payload_key)
    codec = EncryptionCodec(keys.keys, keys.agent_keys())
    to_payloads = pydantic_data_converter.payload_converter.to_payloads
    sealed = codec.encode_sync(to_payloads([_save()]))
    other = codec.encode_sync(to_payloads([_save("b2")]))
    server = make_server(codec, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/decode"
        body = json_format.MessageToJson(Payloads(payloads=[*sealed, *other])).encode()

        def post() -> tuple[int, dict]:
            request = urllib.request.Request(url, data=body, method="POST")
            request.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(request) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        def decoded(answer: dict) -> list[tuple[dict[str, str], object]]:
            found = Payloads()
            json_format.ParseDict(answer, found)
            return [
                ({k: v.decode() for k, v in p.metadata.items()}, json.loads(p.data))
                for p in found.payloads
            ]

        status, answer = post()
        assert status == 200
        assert [value["agent_id"] for _, value in decoded(answer)] == ["a1", "b2"]
        key_id = sealed[0].metadata[KEY_ID].decode()
        keys.agent_keys().destroy("a1")  # type: ignore[union-attr]
        status, answer = post()
        assert status == 200
        (forgotten, placeholder), (_, kept) = decoded(answer)
        assert placeholder == (
            f"[forgotten: agent a1; sealed with data key {key_id}, destroyed by forget, "
            "so no one can decode it]"
        )
        assert forgotten == {
            "encoding": "json/plain",
            FORGOTTEN: "a1",
            FORGOTTEN_KEY_ID: key_id,
        }
        assert kept == json.loads(to_payloads([_save("b2")])[0].data)
    finally:
        server.shutdown()
        server.server_close()


def test_a_destroyed_key_id_is_reported_as_erased_not_unknown(place):
    # An agent id that no hex key id or timestamp can contain: "a1" sits inside a
    # random key id about one run in a hundred.
    key = _key()
    store = place.store(_wrapping(key))
    first = store.current("zoe-q")
    assert store.current("zoe-q") == first
    store.destroy("zoe-q")
    with pytest.raises(AgentKeyErased):
        store.find("zoe-q", first.key_id)
    assert store.destroy("zoe-q") == 0
    assert first.key_id in place.destroyed_list()
    assert "zoe-q" not in place.destroyed_list()


def test_only_a_top_level_agent_field_names_the_agent(place):
    keys = place.keys(_key())
    codec = EncryptionCodec(keys.keys, keys.agent_keys())
    nested_first = {"detail": {"agent_id": "bob"}, "agent_id": "a1"}
    only_nested = {"entries": [{"agent_id": "bob", "content": SECRET}]}
    hostile = {"agent_id": "../../etc", "content": SECRET}
    sealed = codec.encode_sync(
        pydantic_data_converter.payload_converter.to_payloads([nested_first, only_nested, hostile])
    )
    assert sealed[0].metadata[AGENT] == b"a1"
    assert AGENT not in sealed[1].metadata  # the payload key seals it
    assert AGENT not in sealed[2].metadata  # not an agent id: never a path
    assert place.agents_with_keys() == {"a1"}  # no key for bob, none for a path


async def test_a_payload_sealed_on_one_host_opens_on_another_until_forgotten(place):
    payload_key = _key()
    host_a = data_converter(place.keys(payload_key))
    host_b = data_converter(place.keys(payload_key))
    [sealed] = await host_a.encode([_save()])
    assert (await host_b.decode([sealed], [SaveInput])) == [_save()]
    # B's next payload for the agent is sealed with the same key, and A opens it.
    [from_b] = await host_b.encode([_save()])
    assert from_b.metadata[KEY_ID] == sealed.metadata[KEY_ID]
    assert (await host_a.decode([from_b], [SaveInput])) == [_save()]
    # Forgotten through a third instance: neither host opens either payload any more.
    assert place.store(_wrapping(payload_key)).destroy("a1") == 1
    for host in (host_a, host_b):
        for payload in (sealed, from_b):
            with pytest.raises(PayloadErased, match="cannot be decoded by anyone"):
                await host.decode([payload], [SaveInput])


def test_two_first_uses_at_once_agree_on_one_key(place):
    """Each thread has a store of its own (its own pool on the database): 16 agents, both
    asking for the agent's first key at the same moment."""
    key = _key()
    stores = [place.store(_wrapping(key)), place.store(_wrapping(key))]
    agents = [f"race-{n}" for n in range(16)]
    found: list[dict[str, str]] = [{}, {}]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(side: int) -> None:
        try:
            for agent in agents:
                barrier.wait()
                found[side][agent] = stores[side].current(agent).key_id
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(side,)) for side in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert found[0] == found[1]
    assert place.agents_with_keys() == set(agents)


def test_a_first_use_that_loses_the_race_reads_the_winners_key(place, monkeypatch):
    """Deterministic: the loser looked before the winner's key was stored, so it makes a
    key of its own; storing it must not replace the winner's (sealed payloads depend on
    it), and the loser must use the winner's."""
    key = _key()
    winner, loser = place.store(_wrapping(key)), place.store(_wrapping(key))
    first = winner.current("a1")
    look = "_current" if place.kind == "postgres" else "_load"
    real = getattr(loser, look)
    calls = {"n": 0}

    def stale_first_look(*args: Any) -> Any:
        calls["n"] += 1
        return None if calls["n"] == 1 else real(*args)

    monkeypatch.setattr(loser, look, stale_first_look)
    assert loser.current("a1") == first
    assert calls["n"] == 2  # it did make and try to store a key of its own
    assert winner.current("a1") == first
    assert place.agents_with_keys() == {"a1"}


async def test_forget_and_the_codec_server_use_the_databases_keys(
    tmp_path, database_url, monkeypatch
):
    """With a database URL, what the worker and client seal (connect/PayloadKeys with the
    backend's key store) is what `forget` destroys and what the codec server opens, from
    any data directory: no data key is left in a file."""
    from dreamkeeper.activities.forget import forget, forgetting_for
    from dreamkeeper.core.forgetting import ForgetRequest
    from dreamkeeper.core.settings import StoreSettings
    from dreamkeeper.service.codec_server import load_codec
    from dreamkeeper.stores.backends import agent_key_store
    from dreamkeeper.stores.postgres.agent_keys import PostgresAgentKeyStore
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore

    payload_key = _key()
    monkeypatch.setenv(
        "DREAMKEEPER_PAYLOAD_KEY", f"{payload_key.key_id}:{payload_key.secret.hex()}"
    )
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY_FILE", raising=False)
    # The hosts share the payload key and the keyring directory (a shared volume), not
    # their data directories.
    monkeypatch.setenv("DREAMKEEPER_KEYRING", str(tmp_path / "shared-keyring"))
    worker_dir, codec_dir, cli_dir = (tmp_path / n for n in ("worker", "codec", "cli"))
    worker = data_converter(
        PayloadKeys.from_env(data_dir=worker_dir, key_store=agent_key_store(database_url))
    )
    [sealed] = await worker.encode([_save()])
    assert not (worker_dir / "agent-keys").exists()
    codec, _ = load_codec(codec_dir, database_url)
    assert isinstance(codec.agent_keys, PostgresAgentKeyStore)
    assert (
        codec.decode_sync([sealed])[0].data
        == pydantic_data_converter.payload_converter.to_payloads([_save()])[0].data
    )

    db = Database(database_url, max_size=2)
    try:
        PostgresMemoryStore(db, "a1").create(SECRET)
        runner = forgetting_for(StoreSettings(data_dir=cli_dir, database_url=database_url))
        receipt = forget(runner, "a1", ForgetRequest(whole_agent=True))
    finally:
        db.close()
    assert receipt.history_note == "" and receipt.history_keys_destroyed == 1
    with pytest.raises(PayloadErased):
        codec.decode_sync([sealed])
    with pytest.raises(PayloadErased):
        await worker.decode([sealed], [SaveInput])
    assert not (cli_dir / "agent-keys").exists()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(agent=st.text(max_size=80), key_id=st.text(max_size=40))
@example(agent="a1", key_id="\x00")  # a NUL: no text column takes it
@example(agent="a1", key_id="0' OR '1'='1")
def test_any_agent_or_key_id_is_refused_or_served_never_stored_astray(place, agent, key_id):
    """Ids come from payload metadata a codec server is handed: anything that is not an
    agent id is refused before it reaches a path or a query, and an unknown key id is
    "not known here" (or "erased"), never another agent's key."""
    if not hasattr(place, "fuzzed"):
        place.fuzzed = place.store(_wrapping(_key()))  # one store and payload key per run
    store = place.fuzzed
    try:
        key = store.current(agent)
    except InvalidInput:
        with pytest.raises(InvalidInput):
            store.find(agent, key_id)
        assert agent not in place.agents_with_keys()
        return
    assert store.find(agent, key.key_id) == key
    if key_id != key.key_id:
        with pytest.raises(AgentKeyError):
            store.find(agent, key_id)
