"""Invariant 22 end to end: forgetting that can be proven.

A distinctive fact is saved through the worker (payloads sealed with the agent's data
key), saved again (reinforced), merged with a second fact in a dream, stashed in working
memory and mentioned in a conversation turn. Then `forget` (with its derived entries).
Afterwards no file under the data directory holds its bytes, search finds nothing, the
agent's Temporal histories cannot be decoded with any key the system still has, and
the receipt lists every place."""

from __future__ import annotations

import json
import os
import uuid
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
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore
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


def _responder(request: dict) -> Reply:
    """Consolidation merges what it is shown; enrichment returns the text as its one
    fact (so a second save of it is a duplicate, and reinforces the first)."""
    if "long-term memory" in request["messages"][0]["content"] and "[ID:" in json.dumps(
        request["messages"]
    ):
        ids = _prompt_ids(request)
        if len(ids) >= 2:
            return Reply(
                json.dumps(
                    {
                        "toDelete": ids,
                        "toSave": [{"content": MERGED, "category": "people", "sourceIds": ids}],
                    }
                )
            )
    asked = request["messages"][-1]["content"]
    # The prompt may quote memories already saved: the newer text decides.
    text = OTHER if OTHER in asked else FACT
    return Reply(json.dumps([{"content": text, "category": "people", "importance": 0.5}]))


@pytest_asyncio.fixture
async def sealed(temporal_env, tmp_path, llm, monkeypatch):
    """A client and worker on one data directory whose `payload-key` wraps per-agent
    data keys (what `dreamkeeper dev` sets up)."""
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY", raising=False)
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY_FILE", raising=False)
    generate_key_file(tmp_path / "payload-key")
    keys = PayloadKeys.from_env({}, data_dir=tmp_path)
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
    still_on_disk = data_converter(PayloadKeys.from_env({}, data_dir=tmp_path)).payload_codec
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
