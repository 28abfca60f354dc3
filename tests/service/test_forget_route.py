"""`POST /v1/agents/{agent}/forget` and `RemoteMemoryClient.forget` against a running
serve: the receipt, the erasure, and bad requests refused with nothing changed."""

from __future__ import annotations

import uuid

import pytest

from dreamkeeper.agent.remote import RemoteMemoryClient
from dreamkeeper.core.errors import InvalidInput, NotFound
from dreamkeeper.core.forgetting import ForgetRequest
from dreamkeeper.stores.files.conversation_memory import FileConversationStore
from dreamkeeper.stores.files.memory_store import FileMemoryStore

FACT = "Odalys Prent's locker code at Harbour Gym is 5519-XK."


async def test_forget_over_http_erases_and_answers_with_the_receipt(served):
    agent = f"fg-{uuid.uuid4().hex[:8]}"
    store = FileMemoryStore(served.data_dir, agent)
    entry = store.create(FACT, category="people")
    keep = store.create("The user likes rowing on Sundays.")
    FileConversationStore(served.data_dir, agent).add_turn("s1", "user", f"Note: {FACT}")
    memory = RemoteMemoryClient(served.url, token=served.token)

    preview = await memory.forget(agent, ForgetRequest(match="harbour gym", dry_run=True))
    assert preview.dry_run and preview.entries == [entry.id]
    assert store.get(entry.id) is not None  # a dry run changes nothing

    receipt = await memory.forget(agent, ForgetRequest(match="Harbour Gym"))
    assert receipt.entries == [entry.id] and receipt.verified
    assert {r.what for r in receipt.removed} >= {"entry files", "turns"}
    assert "Odalys" not in receipt.model_dump_json()
    # No payload key on this server: the receipt says the histories were not shredded.
    assert "not encrypted" in receipt.history_note
    with pytest.raises(NotFound):
        memory.get_memory(agent, entry.id)
    assert memory.search_memory(agent, "Odalys locker", include_archived=True) == []
    assert [h.entry.id for h in memory.search_memory(agent, "rowing")] == [keep.id]
    await memory.aclose()


async def test_bad_forget_requests_are_refused_and_change_nothing(served):
    agent = f"fg-{uuid.uuid4().hex[:8]}"
    entry = FileMemoryStore(served.data_dir, agent).create(FACT)
    memory = RemoteMemoryClient(served.url, token=served.token)
    with pytest.raises(InvalidInput, match="one"):
        await memory.forget(agent, ForgetRequest())
    with pytest.raises(InvalidInput, match="one"):
        await memory.forget(agent, ForgetRequest(ids=[entry.id], whole_agent=True))
    with pytest.raises(NotFound):
        await memory.forget(f"nobody-{uuid.uuid4().hex[:6]}", ForgetRequest(whole_agent=True))
    with served.client() as client:
        for body in (
            {},
            {"ids": ["../../x"]},
            {"match": "ab"},
            {"ids": [entry.id], "match": "locker"},
            {"ids": [entry.id], "surprise": True},
            {"wholeAgent": True, "derived": "sometimes"},
        ):
            answer = client.post(f"/v1/agents/{agent}/forget", json=body)
            assert answer.status_code in (400, 422), (body, answer.text)
    assert FileMemoryStore(served.data_dir, agent).get(entry.id) is not None
    await memory.aclose()
