"""Per-agent data keys (client/agent_keys.py) in the payload codec: a payload naming an
agent is sealed with that agent's key; destroying the key makes it undecodable by any
key the system still has, with a clear message; payload-key rotation keeps working."""

from __future__ import annotations

import json
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import WorkflowSerializationContext

from dreamkeeper.client.agent_keys import AgentKeyErased, FileAgentKeyStore
from dreamkeeper.client.codec import (
    AGENT,
    KEY_ID,
    EncryptionCodec,
    PayloadErased,
    PayloadKey,
    PayloadKeyMismatch,
    PayloadKeys,
    data_converter,
    derived_key_id,
)
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


def _keys(data: Path, *keys: PayloadKey) -> PayloadKeys:
    return PayloadKeys(tuple(keys), "test", data_dir=data)


async def test_a_payload_naming_an_agent_is_sealed_with_its_data_key(tmp_path):
    payload_key = _key()
    converter = data_converter(_keys(tmp_path, payload_key))
    [sealed] = await converter.encode([_save()])
    assert sealed.metadata[AGENT] == b"a1"
    data_key = FileAgentKeyStore(tmp_path, [(payload_key.key_id, payload_key.secret)]).current("a1")
    assert sealed.metadata[KEY_ID] == data_key.key_id.encode()
    assert SECRET.encode() not in sealed.SerializeToString()
    assert SECRET.encode() not in (tmp_path / "agent-keys" / "a1.json").read_bytes()
    assert data_key.secret not in (tmp_path / "agent-keys" / "a1.json").read_bytes()
    [back] = await converter.decode([sealed], [SaveInput])
    assert back == _save()
    # Another agent gets another key.
    [other] = await converter.encode([_save("b2")])
    assert other.metadata[KEY_ID] != sealed.metadata[KEY_ID]


def test_a_result_naming_no_agent_is_sealed_with_its_workflows_agent(tmp_path):
    keys = _keys(tmp_path, _key())
    codec = EncryptionCodec(keys.keys, keys.agent_keys())
    bound = codec.with_context(WorkflowSerializationContext(namespace="default", workflow_id="w1"))
    payloads = pydantic_data_converter.payload_converter.to_payloads([_save(), "a plain result"])
    sealed = bound.encode_sync(payloads)
    assert sealed[0].metadata[AGENT] == b"a1"
    assert sealed[1].metadata[AGENT] == b"a1"  # learned from the workflow's input
    unbound = codec.encode_sync(payloads[1:])
    assert AGENT not in unbound[0].metadata  # no agent known: the payload key seals it


async def test_destroying_the_key_makes_its_payloads_undecodable_everywhere(tmp_path):
    payload_key = _key()
    converter = data_converter(_keys(tmp_path, payload_key))
    [sealed] = await converter.encode([_save()])
    assert (
        FileAgentKeyStore(tmp_path, [(payload_key.key_id, payload_key.secret)]).destroy("a1") == 1
    )
    # The same process (its cache notices the file went) and a fresh one refuse it.
    for fresh in (converter, data_converter(_keys(tmp_path, payload_key))):
        with pytest.raises(
            PayloadErased, match="destroyed when the agent's memories were forgotten"
        ):
            await fresh.decode([sealed], [SaveInput])
    # No key the system has opens it: the payload key itself, as a plain key, fails too.
    with pytest.raises(PayloadKeyMismatch):
        await data_converter(PayloadKeys((payload_key,), "no data dir")).decode([sealed])
    assert not any(p.name.startswith("a1") for p in (tmp_path / "agent-keys").iterdir()), (
        "no copy of the key is left"
    )
    # The agent's next payload gets a new key and decodes.
    [again] = await converter.encode([_save()])
    assert again.metadata[KEY_ID] != sealed.metadata[KEY_ID]
    assert (await converter.decode([again], [SaveInput])) == [_save()]


async def test_rotating_the_payload_key_keeps_data_keys_working(tmp_path):
    old, new = _key(), _key()
    [sealed] = await data_converter(_keys(tmp_path, old)).encode([_save()])
    rotated = data_converter(_keys(tmp_path, new, old))  # new seals, old only opens
    assert (await rotated.decode([sealed], [SaveInput])) == [_save()]
    [later] = await rotated.encode([_save()])
    assert (await rotated.decode([later], [SaveInput])) == [_save()]
    # Without the old key the wrapped data key cannot be opened: a clear mismatch.
    with pytest.raises(PayloadKeyMismatch, match="decode-only"):
        await data_converter(_keys(tmp_path, new)).decode([sealed], [SaveInput])


def test_the_codec_server_refuses_an_erased_payload_with_a_clear_message(tmp_path):
    payload_key = _key()
    keys = _keys(tmp_path, payload_key)
    codec = EncryptionCodec(keys.keys, keys.agent_keys())
    sealed = codec.encode_sync(pydantic_data_converter.payload_converter.to_payloads([_save()]))
    server = make_server(codec, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/decode"
        body = json_format.MessageToJson(Payloads(payloads=sealed)).encode()

        def post() -> tuple[int, dict]:
            request = urllib.request.Request(url, data=body, method="POST")
            request.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(request) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        status, answer = post()
        assert status == 200 and len(answer["payloads"]) == 1
        keys.agent_keys().destroy("a1")  # type: ignore[union-attr]
        status, answer = post()
        assert status == 410
        assert "forgotten" in answer["error"] and "cannot be decoded by anyone" in answer["error"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_destroyed_key_id_is_reported_as_erased_not_unknown(tmp_path):
    key = _key()
    store = FileAgentKeyStore(tmp_path, [(key.key_id, key.secret)])
    first = store.current("a1")
    assert store.current("a1") == first
    store.destroy("a1")
    with pytest.raises(AgentKeyErased):
        store.find("a1", first.key_id)
    assert store.destroy("a1") == 0
    assert "a1" not in (tmp_path / "agent-keys" / "destroyed.jsonl").read_text()


def test_only_a_top_level_agent_field_names_the_agent(tmp_path):
    keys = _keys(tmp_path, _key())
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
    assert not (tmp_path / "agent-keys" / "bob.json").exists()
    assert [p.name for p in (tmp_path / "agent-keys").iterdir()] == ["a1.json"]
