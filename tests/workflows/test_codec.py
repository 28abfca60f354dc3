"""Invariant 18 end to end: with a key on the worker and the client, a save (enriched by
the scripted LLM) and a dream cycle leave no memory content readable in the real
server's histories — `temporal workflow show` sees ciphertext — while the same command
through Dreamkeeper's codec server (bearer token on) shows the content again."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest_asyncio
from temporalio.client import Client

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.client.codec import EncryptionCodec, PayloadKey, PayloadKeys, data_converter
from dreamkeeper.core.names import dream_workflow_id, save_workflow_id
from dreamkeeper.core.payloads import SaveResult
from dreamkeeper.core.settings import EmbeddingSettings, LLMSettings, StoreSettings
from dreamkeeper.service.codec_server import CodecServerSettings, make_server
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.testing.scripted_llm import Reply
from dreamkeeper.worker.temporal_worker import build_worker

TEMPORAL = Path(sys.executable).parent / "temporal"
TOKEN = "codec-test-token"
ORIGINAL = "Trish Roberts of PWOP Productions gave her number, +1 386-299-4605."
FACTS = [
    {
        "content": "Trish Roberts works at PWOP Productions.",
        "category": "people/colleagues",
        "tags": ["people"],
        "importance": 0.7,
    },
    {
        "content": "Trish Roberts's phone number is +1 386-299-4605.",
        "category": "people/contacts",
        "tags": ["phone"],
        "importance": 0.6,
    },
]
SEALED = base64.b64encode(b"binary/encrypted").decode()
MERGED = "Trish Roberts works at PWOP Productions; her phone number is +1 386-299-4605."
CONTENT = ["Trish", "Roberts", "PWOP", "386-299-4605", ORIGINAL, MERGED] + [
    f["content"] for f in FACTS
]


@pytest_asyncio.fixture
async def sealed(temporal_env, tmp_path, llm):
    """A client and worker sealing payloads with one key, and a codec server with it."""
    key = PayloadKey("test-key", os.urandom(32))
    address = temporal_env.client.service_client.config.target_host
    client = await Client.connect(
        address, data_converter=data_converter(PayloadKeys((key,), "test"))
    )
    server = make_server(EncryptionCodec([key]), "127.0.0.1", 0, CodecServerSettings(token=TOKEN))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = StoreSettings(data_dir=tmp_path)
    queue = f"codec-{uuid.uuid4().hex[:8]}"
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
            yield (
                MemoryClient(client, settings, queue),
                address,
                f"http://127.0.0.1:{server.server_address[1]}",
            )
    server.shutdown()
    server.server_close()


def _payloads(node) -> list[dict]:
    """Every payload in a history printed by `temporal workflow show --output json`."""
    if isinstance(node, list):
        return [p for value in node for p in _payloads(value)]
    if not isinstance(node, dict):
        return []
    found = [node] if isinstance(node.get("metadata"), dict) and "data" in node else []
    return found + [p for value in node.values() for p in _payloads(value)]


def _readable(history: dict) -> str:
    """The history as printed, plus every payload's data base64-decoded: the CLI prints
    payloads raw, so plaintext could otherwise hide behind base64."""
    decoded = [
        base64.b64decode(p["data"]).decode("utf-8", errors="replace") for p in _payloads(history)
    ]
    return "\n".join([json.dumps(history), *decoded])


async def _show(address: str, workflow_id: str, *codec: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    done = await asyncio.to_thread(
        subprocess.run,
        [
            str(TEMPORAL),
            "workflow",
            "show",
            "--workflow-id",
            workflow_id,
            "--output",
            "json",
            "--address",
            address,
            "--namespace",
            "default",
            *codec,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_histories_hold_no_content_and_the_codec_server_reveals_it(sealed, llm):
    memory, address, endpoint = sealed
    agent = f"k-{uuid.uuid4().hex[:6]}"
    llm.replies.append(Reply(json.dumps(FACTS)))
    ack = await memory.save_memory(agent, ORIGINAL, category="people", source="user")
    save_id = save_workflow_id(agent, ack.entry_id)
    saved = await memory.client.get_workflow_handle(save_id, result_type=SaveResult).result()
    assert saved.outcome == "enriched"
    facts = [r.entry_id for r in saved.replacements]
    # The dream's consolidation: one honest merge of the two facts.
    llm.replies.append(
        Reply(
            json.dumps(
                {
                    "toDelete": facts,
                    "toSave": [
                        {"content": MERGED, "category": "people/contacts", "sourceIds": facts},
                    ],
                }
            )
        )
    )
    dream = await memory.run_dream(agent)
    assert len(dream.consolidation.merged) == 1
    live = FileMemoryStore(memory.settings.data_dir, agent).entries()
    assert [e.content for e in live] == [MERGED]  # the work happened, in plaintext on disk

    consolidation_id = f"{dream_workflow_id(agent)}-consolidation"
    codec = ["--codec-endpoint", endpoint + "/{namespace}", "--codec-auth", f"Bearer {TOKEN}"]
    for workflow_id, expected in ((save_id, ORIGINAL), (consolidation_id, MERGED)):
        raw = await _show(address, workflow_id)
        leaked = [s for s in CONTENT if s in _readable(raw)]
        assert leaked == [], f"{workflow_id} history shows {leaked}"
        sealed = [p for p in _payloads(raw) if p["metadata"].get("encoding") == SEALED]
        assert sealed, f"{workflow_id}: no sealed payloads"
        decoded = await _show(address, workflow_id, *codec)
        assert expected in _readable(decoded)
        assert not [p for p in _payloads(decoded) if p["metadata"].get("encoding") == SEALED]
    assert not [s for s in CONTENT if s in _readable(await _show(address, f"dream-{agent}"))]
    # Without the token the codec server opens nothing.
    refused = httpx.post(f"{endpoint}/decode", json={"payloads": sealed}, timeout=5)
    assert refused.status_code == 401 and "Trish" not in refused.text


async def test_clients_connect_with_the_configured_key(temporal_env, tmp_path, monkeypatch):
    """runtime.connect (the worker, `dreamkeeper dev`) and MemoryClient.connect (agents,
    the CLI's writes) seal with the environment's key, else the data directory's."""
    from dreamkeeper.client.codec import generate_key_file
    from dreamkeeper.core.settings import TemporalSettings
    from dreamkeeper.worker import runtime

    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY_FILE", raising=False)
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY", raising=False)
    temporal = TemporalSettings(address=temporal_env.client.service_client.config.target_host)
    plain = await runtime.connect(temporal, tmp_path)
    assert not isinstance(plain.data_converter.payload_codec, EncryptionCodec)
    dev_key = generate_key_file(tmp_path / "payload-key")
    memory = await MemoryClient.connect(StoreSettings(data_dir=tmp_path), temporal)
    assert memory.client.data_converter.payload_codec.key_id == dev_key.key_id
    monkeypatch.setenv(
        "DREAMKEEPER_PAYLOAD_KEY", "prod:" + base64.b64encode(os.urandom(32)).decode()
    )
    client = await runtime.connect(temporal, tmp_path)
    assert client.data_converter.payload_codec.key_id == "prod"
