"""Invariant 22 end to end: forgetting that can be proven, on files and on PostgreSQL.

A distinctive fact is saved through the worker (payloads sealed with the agent's data
key), saved again (reinforced), merged with a second fact in a dream, stashed in working
memory and mentioned in a conversation turn. Then `forget` (with its derived entries).
Afterwards no file under the data directory holds its bytes, search finds nothing, the
agent's Temporal histories cannot be decoded with any key the system still has, and
the receipt lists every place.

On PostgreSQL the proof is read from the database's own files: after a CHECKPOINT no file
of the cluster's data directory (heap, TOAST, the WAL) holds the text in plaintext — a
probe table written as is shows the scan would see it — and every wrapped copy of the
destroyed data keys the files still hold opens with no key that is left (the keyring's
key-encryption keys, the payload key) — a live agent's key, found the same way, opens its
payloads."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import pytest_asyncio
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.client.codec import (
    AGENT,
    EncryptionCodec,
    PayloadDecodeError,
    PayloadErased,
    PayloadKeys,
    data_converter,
    generate_key_file,
)
from dreamkeeper.core.forgetting import ForgetRequest
from dreamkeeper.core.names import dream_workflow_id, save_workflow_id
from dreamkeeper.core.payloads import SaveResult
from dreamkeeper.core.settings import EmbeddingSettings, LLMSettings, StoreSettings
from dreamkeeper.stores.files.backend import FileBackend
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.testing.scripted_llm import Reply
from dreamkeeper.worker.temporal_worker import build_worker

FACT = "Quillon Varga keeps the spare key under the blue heron statue at 4471 Marsh Lane."
OTHER = "Quillon Varga's spare key also opens the garden shed."
MERGED = (
    "Quillon Varga keeps the spare key under the blue heron statue at 4471 Marsh Lane; "
    "the key also opens the garden shed."
)
DISTINCTIVE = "blue heron statue"  # in FACT and MERGED, nowhere else


def _prompt_ids(request: dict) -> list[str]:
    text = request["messages"][1]["content"]
    return [part.split("]", 1)[0] for part in text.split("[ID:")[1:]]


def _responder_for(fact: str, other: str, merged: str) -> Callable[[dict], Reply]:
    """Consolidation merges what it is shown; enrichment returns the text as its one
    fact (so a second save of it is a duplicate, and reinforces the first)."""

    def respond(request: dict) -> Reply:
        if "long-term memory" in request["messages"][0]["content"] and "[ID:" in json.dumps(
            request["messages"]
        ):
            ids = _prompt_ids(request)
            if len(ids) >= 2:
                saved = [{"content": merged, "category": "people", "sourceIds": ids}]
                return Reply(json.dumps({"toDelete": ids, "toSave": saved}))
        asked = request["messages"][-1]["content"]
        # The prompt may quote memories already saved: the newer text decides.
        text = other if other in asked else fact
        return Reply(json.dumps([{"content": text, "category": "people", "importance": 0.5}]))

    return respond


_responder = _responder_for(FACT, OTHER, MERGED)


@pytest_asyncio.fixture
async def sealed(temporal_env, tmp_path, llm, monkeypatch):
    """A client and worker on one data directory whose `payload-key` wraps per-agent
    data keys (what `dreamkeeper dev` sets up)."""
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY", raising=False)
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY_FILE", raising=False)
    generate_key_file(tmp_path / "payload-key")
    keys = PayloadKeys.from_env({}, data_dir=tmp_path, key_store=FileBackend(tmp_path).agent_keys)
    address = temporal_env.client.service_client.config.target_host
    client = await Client.connect(address, data_converter=data_converter(keys))
    settings = StoreSettings(data_dir=tmp_path)
    queue = f"forget-{uuid.uuid4().hex[:8]}"
    llm.responder = _responder
    with ThreadPoolExecutor(max_workers=4) as executor:
        worker = build_worker(
            client,
            settings,
            task_queue=queue,
            executor=executor,
            embeddings=EmbeddingSettings(),
            llm=LLMSettings(base_url=llm.base_url, model="scripted", timeout_seconds=30),
        )
        async with worker:
            yield MemoryClient(client, settings, queue), keys


def _files_holding(root: Path, text: str) -> list[str]:
    forms = {
        text.encode(),
        json.dumps(text)[1:-1].encode(),
        text.lower().encode(),
    }
    found = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            raw = path.read_bytes()
            if any(f in raw or f in raw.lower() for f in forms):
                found.append(str(path.relative_to(root)))
    return found


async def _histories(client: Client, workflow_ids: list[str]) -> dict[str, list[Payload]]:
    """Every payload of every run of these workflows, as the server stores them, and
    the ids of the child workflows they started (followed too)."""
    found: dict[str, list[Payload]] = {}
    todo = list(workflow_ids)
    while todo:
        workflow_id = todo.pop()
        if workflow_id in found:
            continue
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        payloads: list[Payload] = []
        for event in history.events:
            _collect(event, payloads)
            started = event.child_workflow_execution_started_event_attributes
            if started.workflow_execution.workflow_id:
                todo.append(started.workflow_execution.workflow_id)
        found[workflow_id] = payloads
    return found


def _collect(event, out: list[Payload]) -> None:
    """Every Payload inside a history event (in its JSON form: a dict with metadata and
    data)."""

    def walk(node) -> None:
        if isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, dict):
            if isinstance(node.get("metadata"), dict) and "data" in node:
                out.append(json_format.ParseDict(node, Payload()))
                return
            for value in node.values():
                walk(value)

    walk(json_format.MessageToDict(event))


async def test_a_forgotten_fact_is_gone_from_every_place_and_every_history(sealed, tmp_path):
    memory, keys = sealed
    agent = f"f-{uuid.uuid4().hex[:6]}"

    # Save it, and again (reinforced); a related fact; then a dream merges the two.
    first = await memory.save_memory(agent, FACT, category="people", source="user")
    again = await memory.save_memory(agent, FACT, category="people", source="user")
    other = await memory.save_memory(agent, OTHER, category="people", source="user")
    saves = [first, again, other]
    for ack in saves:
        await memory.client.get_workflow_handle(
            save_workflow_id(agent, ack.entry_id), result_type=SaveResult
        ).result()
    store = FileMemoryStore(tmp_path, agent)
    [fact] = [e for e in store.entries() if e.content == FACT]
    assert fact.reinforcement_count == 2
    dream = await memory.run_dream(agent)
    assert len(dream.consolidation.merged) == 1
    assert [e.content for e in store.entries()] == [MERGED]
    # A copy in working memory, and a mention in a conversation turn.
    memory.working_memory(agent).save("session/s1", "fact", FACT)
    conversation = memory.conversations(agent)
    conversation.add_turn("s1", "user", f"Remember this: {FACT}")
    conversation.add_turn("s1", "assistant", "I will.")
    before = _files_holding(tmp_path, DISTINCTIVE)
    assert len(before) >= 5, before  # entry files, ledger, working memory, turns, log

    everything = store.entries(include_archived=True)
    originals = [e.id for e in everything if e.content == FACT and e.id != fact.id]
    [kept] = [e.id for e in everything if e.content == OTHER and not e.metadata.get("source")]
    receipt = await memory.forget(agent, ForgetRequest(ids=[fact.id], derived="forget"))

    # The receipt: what went, from where, and the proof.
    merged_id = dream.consolidation.merged[0].new_id
    # The entry, the saves it was enriched from (the same text), and the merge.
    assert sorted(receipt.entries) == sorted([fact.id, *originals, merged_id])
    assert sorted(receipt.copies) == sorted(originals) and len(originals) == 2
    assert receipt.derived == [merged_id]
    # The other fact of the merge is live again: forgetting one fact loses no other.
    assert receipt.restored == [kept]
    assert [e.content for e in store.entries()] == [OTHER]
    places = {(r.place, r.what) for r in receipt.removed}
    root = f"agents/{agent}"
    assert (f"{root}/memory", "entry files") in places
    assert any(p.startswith(f"{root}/dreams/") and w == "ledger lines" for p, w in places)
    assert (f"{root}/working-memory", "entries") in places
    assert (f"{root}/conversations/sessions/s1.json", "turns") in places
    assert (f"{root}/conversation-log/turns.jsonl", "turns") in places
    assert ("payload data keys", "Temporal history keys") in places
    assert receipt.history_keys_destroyed == 1
    assert receipt.verified, receipt.verification
    assert DISTINCTIVE not in receipt.model_dump_json()

    # No file under the data directory holds its bytes.
    assert _files_holding(tmp_path, DISTINCTIVE) == []
    assert _files_holding(tmp_path, "Marsh Lane") == []
    # Search finds nothing (the second fact, restored, is all that is left of Quillon).
    hits = memory.search_memory(agent, "Quillon Varga spare key heron", include_archived=True)
    assert {h.entry.content for h in hits} == {OTHER}

    # The agent's histories: sealed with its data key, which nobody has any more.
    histories = await _histories(
        memory.client,
        [save_workflow_id(agent, a.entry_id) for a in saves] + [dream_workflow_id(agent)],
    )
    still_on_disk = data_converter(
        PayloadKeys.from_env({}, data_dir=tmp_path, key_store=FileBackend(tmp_path).agent_keys)
    ).payload_codec
    payload_key_only = EncryptionCodec(keys.keys)  # the wrapping key, used directly
    assert isinstance(still_on_disk, EncryptionCodec)
    erased = 0
    for workflow_id, payloads in histories.items():
        for payload in payloads:
            assert DISTINCTIVE.encode() not in payload.SerializeToString(), workflow_id
            if AGENT not in payload.metadata:
                continue  # sealed without an agent: must hold no content (checked below)
            with pytest.raises(PayloadErased, match="forgotten"):
                still_on_disk.decode_sync([payload])
            with pytest.raises(PayloadDecodeError):
                payload_key_only.decode_sync([payload])
            erased += 1
    assert erased >= 6, erased  # saves' inputs, updates, results, the dream's children
    # What the system can still open carries nothing of the fact.
    for payloads in histories.values():
        for payload in payloads:
            if AGENT in payload.metadata:
                continue
            opened = still_on_disk.decode_sync([payload])[0].SerializeToString()
            assert DISTINCTIVE.encode() not in opened
            assert b"Marsh Lane" not in opened


# -- On PostgreSQL: proven from the database's own files -------------------------------


def _made_up_name() -> str:
    """A proper noun no other test writes (the cluster is the whole session's)."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    raw = os.urandom(8)
    return "".join(
        (consonants if i % 2 == 0 else vowels)[b % (14 if i % 2 == 0 else 5)]
        for i, b in enumerate(raw)
    ).capitalize()


@pytest_asyncio.fixture
async def sealed_on_database(temporal_env, tmp_path, llm, monkeypatch, database_url):
    """A client and worker on a database, with a payload key in the data directory: the
    agents' data keys are rows wrapped by the keyring under `{data}/keyring`, and memory
    content is sealed at rest with them."""
    from dreamkeeper.stores.postgres.backend import PostgresBackend

    for name in ("DREAMKEEPER_PAYLOAD_KEY", "DREAMKEEPER_PAYLOAD_KEY_FILE", "DREAMKEEPER_KEYRING"):
        monkeypatch.delenv(name, raising=False)
    generate_key_file(tmp_path / "payload-key")
    keys = PayloadKeys.from_env(
        {}, data_dir=tmp_path, key_store=PostgresBackend(database_url).agent_keys
    )
    address = temporal_env.client.service_client.config.target_host
    client = await Client.connect(address, data_converter=data_converter(keys))
    settings = StoreSettings(data_dir=tmp_path, database_url=database_url)
    queue = f"forget-pg-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(max_workers=4) as executor:
        worker = build_worker(
            client,
            settings,
            task_queue=queue,
            executor=executor,
            embeddings=EmbeddingSettings(),
            llm=LLMSettings(base_url=llm.base_url, model="scripted", timeout_seconds=30),
        )
        async with worker:
            yield MemoryClient(client, settings, queue), keys


def _checkpoint(cluster) -> None:
    import psycopg

    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def _cluster_files(cluster) -> list[Path]:
    """Every file of the cluster's data directory: heap and TOAST files, the WAL, ..."""
    return [Path(d) / n for d, _, names in os.walk(cluster.data) for n in names]


def _files_holding_any(cluster, texts: list[str]) -> list[str]:
    needles = set()
    for text in texts:
        needles |= {text.encode(), text.lower().encode(), json.dumps(text)[1:-1].encode()}
    found = []
    for path in _cluster_files(cluster):
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        if any(n in raw or n in raw.lower() for n in needles):
            found.append(str(path.relative_to(cluster.data)))
    return found


# A data key row's nonce and wrapped key as PostgreSQL lays them out in a heap tuple and
# in a WAL record: each a bytea with a one-byte header, (length + 1) * 2 + 1.
_NONCE_AND_WRAPPED = re.compile(rb"\x1b(.{12})\x63(.{48})", re.S)


def _wrapped_copies(cluster, agent: str, key_id: str) -> list[tuple[bytes, bytes]]:
    """Every (nonce, wrapped key) the files hold for data key `key_id`: found after each
    place the files name the key (its row in the heap, dead or alive; its records in the
    WAL)."""
    candidates = []
    for path in _cluster_files(cluster):
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        start = raw.find(key_id.encode())
        while start != -1:
            window = raw[start : start + 160]
            candidates += [(m[1], m[2]) for m in _NONCE_AND_WRAPPED.finditer(window)]
            start = raw.find(key_id.encode(), start + 1)
    return candidates


def _unwrapped(candidates, agent: str, key_id: str, keks: list) -> list[bytes]:
    from cryptography.exceptions import InvalidTag

    from dreamkeeper.client.agent_keys import data_key_aad

    aad = data_key_aad(agent, key_id)
    opened = set()
    for nonce, wrapped in candidates:
        for kek in keks:
            try:
                opened.add(kek.decrypt(nonce, wrapped, aad))
            except InvalidTag:
                continue
    return sorted(opened)


def _keks_left(keyring: Path, keys: PayloadKeys) -> list:
    """Every key-encryption key the keyring still holds, and the payload keys themselves."""
    import base64

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from dreamkeeper.stores.postgres.keyring import _kek_aad

    payload = {k.key_id: AESGCM(k.secret) for k in keys.keys}
    found = list(payload.values())
    for path in keyring.glob("kek-*.json"):
        body = json.loads(path.read_bytes())
        for entry in body["keys"]:
            secret = payload[entry["wrappedBy"]].decrypt(
                base64.b64decode(entry["nonce"]),
                base64.b64decode(entry["wrapped"]),
                _kek_aad(body["store"], entry["id"]),
            )
            found.append(AESGCM(secret))
    return found


def _opens_payload(secret: bytes, payload: Payload, agent: str, key_id: str) -> bool:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        AESGCM(secret).decrypt(payload.data[:12], payload.data[12:], f"{agent}\0{key_id}".encode())
    except InvalidTag:
        return False
    return True


async def test_on_postgres_a_forgotten_fact_is_in_no_file_of_the_database_and_no_key_left_opens_it(
    sealed_on_database, postgres_cluster, database_url, llm, tmp_path
):
    import psycopg

    from dreamkeeper.client.codec import KEY_ID
    from dreamkeeper.stores.postgres.forget import AT_REST

    memory, keys = sealed_on_database
    name, street = _made_up_name(), _made_up_name()
    fact = f"Quillon {name} keeps the spare key under the blue heron statue at 4471 {street} Lane."
    other = f"Quillon {name}'s spare key also opens the garden shed."
    merged = (
        f"Quillon {name} keeps the spare key under the blue heron statue at 4471 {street} Lane; "
        "the key also opens the garden shed."
    )
    llm.responder = _responder_for(fact, other, merged)
    agent, bystander = f"pg-{uuid.uuid4().hex[:6]}", f"by-{uuid.uuid4().hex[:6]}"

    # Through the real stack: saved (and again: reinforced), a related fact, a dream
    # merging them, a copy in working memory, a conversation turn; a bystander's save.
    saves = [
        await memory.save_memory(agent, fact, category="people", source="user"),
        await memory.save_memory(agent, fact, category="people", source="user"),
        await memory.save_memory(agent, other, category="people", source="user"),
    ]
    kept = await memory.save_memory(bystander, f"{name} Bystander drinks green tea", source="user")
    for ack, who in [*((a, agent) for a in saves), (kept, bystander)]:
        await memory.client.get_workflow_handle(
            save_workflow_id(who, ack.entry_id), result_type=SaveResult
        ).result()
    dream = await memory.run_dream(agent)
    assert len(dream.consolidation.merged) == 1
    memory.working_memory(agent).save("session/s1", "fact", fact)
    memory.conversations(agent).add_turn("s1", "user", f"Remember this: {fact}")
    store = memory.store(agent)
    [entry] = [e for e in store.entries() if e.content == merged]

    # The scan sees plaintext where there is some (a probe table written as is) ...
    probe = f"probe {_made_up_name()} probe"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE dk_test_probe (t text)")
        conn.execute("INSERT INTO dk_test_probe VALUES (%s)", (probe,))
    _checkpoint(postgres_cluster)
    assert _files_holding_any(postgres_cluster, [probe])
    # ... and memory content is in no file, sealed from its first write.
    assert _files_holding_any(postgres_cluster, [name, street]) == []

    receipt = await memory.forget(agent, ForgetRequest(ids=[entry.id], derived="forget"))
    assert receipt.verified, receipt.verification
    assert receipt.sealed_at_rest and receipt.left_to_operator == [AT_REST]
    assert receipt.verification.scanned == "rows" and "entry files" not in receipt.model_dump_json()
    assert any(r.what == "retired key-encryption keys" for r in receipt.removed)
    assert [e.content for e in memory.store(agent).entries()] == [other]

    _checkpoint(postgres_cluster)
    assert _files_holding_any(postgres_cluster, [street, name, f"{street} Lane"]) == []

    # The agent's histories, and the keys: each data key that sealed them is still in
    # the files (the deleted row in the heap, its records in the WAL), wrapped; no key
    # left anywhere (the keyring's, the payload key) unwraps it.
    histories = await _histories(
        memory.client,
        [save_workflow_id(agent, a.entry_id) for a in saves] + [dream_workflow_id(agent)],
    )
    payloads = [
        p for ps in histories.values() for p in ps if p.metadata.get(AGENT) == agent.encode()
    ]
    assert len(payloads) >= 6
    codec = data_converter(keys).payload_codec
    keks = _keks_left(tmp_path / "keyring", keys)
    destroyed = {p.metadata[KEY_ID].decode() for p in payloads}
    for key_id in destroyed:
        copies = _wrapped_copies(postgres_cluster, agent, key_id)
        assert copies, f"the destroyed key {key_id} is named nowhere in the files"
        assert _unwrapped(copies, agent, key_id, keks) == []
    for payload in payloads:
        with pytest.raises(PayloadErased):
            codec.decode_sync([payload])

    # The same search finds a live key and opens its agent's payload: the check can tell.
    [by_history] = (
        await _histories(memory.client, [save_workflow_id(bystander, kept.entry_id)])
    ).values()
    by_payload = next(p for p in by_history if p.metadata.get(AGENT) == bystander.encode())
    by_key = by_payload.metadata[KEY_ID].decode()
    secrets = _unwrapped(
        _wrapped_copies(postgres_cluster, bystander, by_key), bystander, by_key, keks
    )
    assert any(_opens_payload(s, by_payload, bystander, by_key) for s in secrets)

    # Then the whole agent: its new key (made by the re-key) goes the same way.
    with psycopg.connect(database_url, autocommit=True) as conn:
        [(new_key,)] = conn.execute(
            "SELECT key_id FROM dreamkeeper_agent_keys WHERE agent_id = %s", (agent,)
        ).fetchall()
    whole = await memory.forget(agent, ForgetRequest(whole_agent=True))
    assert whole.verified and whole.history_keys_destroyed == 1, whole.verification
    _checkpoint(postgres_cluster)
    keks = _keks_left(tmp_path / "keyring", keys)
    copies = _wrapped_copies(postgres_cluster, agent, new_key)
    assert copies and _unwrapped(copies, agent, new_key, keks) == []
    assert _files_holding_any(postgres_cluster, [street, name]) == []
    assert memory.search_memory(bystander, "green tea")  # the bystander reads on
