"""Embeddings through the worker: a save's vector, cosine dedup, the dream backfill and
cosine clustering — real dev server, scripted /v1/embeddings (and LLM) over HTTP."""

from __future__ import annotations

import json
import uuid

import pytest

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.core.dream_payloads import DreamInput, DreamResult
from dreamkeeper.core.names import save_workflow_id
from dreamkeeper.core.payloads import SaveResult
from dreamkeeper.core.settings import EmbeddingSettings
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.vector_files import vector_path
from dreamkeeper.stores.search.query import search
from dreamkeeper.stores.vectors.embedding_client import EmbeddingClient
from dreamkeeper.testing.scripted_llm import Reply
from dreamkeeper.workflows.dream import Dream


@pytest.fixture
def reader(embedder):
    client = EmbeddingClient(EmbeddingSettings(base_url=embedder.base_url, model="scripted-embed"))
    yield client
    client.close()


async def _save(memory: MemoryClient, agent: str, content: str, category: str):
    ack = await memory.save_memory(agent, content, category=category)
    handle = memory.client.get_workflow_handle(
        save_workflow_id(agent, ack.entry_id), result_type=SaveResult
    )
    return ack.entry_id, await handle.result()


async def test_a_save_gets_its_vector_after_the_ack_and_hybrid_search_finds_it(
    memory, embedder, reader
):
    agent = f"e-{uuid.uuid4().hex[:6]}"
    entry_id, result = await _save(memory, agent, "The family hound is called Rex", "pets")
    assert result.embeddings is not None and result.embeddings.embedded == 1
    store = FileMemoryStore(memory.settings.data_dir, agent, embeddings=reader)
    assert vector_path(store.embeddings_dir, entry_id).exists()
    assert [h.entry.id for h in search(store, "puppy")] == [entry_id]


async def test_cosine_dedup_reinforces_a_restatement_jaccard_would_have_kept(memory, embedder):
    agent = f"e-{uuid.uuid4().hex[:6]}"
    first, _ = await _save(
        memory, agent, "The family hound, a beagle from Ohio, is called Biscuit", "pets"
    )
    # Three content tokens of seven in common: only cosine finds the entry it repeats.
    second, result = await _save(memory, agent, "The hound is called Biscuit", "pets")
    assert result.outcome == "deduplicated"
    assert [r.entry_id for r in result.replacements] == [first]
    store = FileMemoryStore(memory.settings.data_dir, agent)
    assert store.require(first).reinforcement_count == 2
    assert store.require(second).archive_reason == f"merged into {first}"
    # A paraphrase in other words is as close by cosine, but not proof of the same fact.
    third, result = await _save(memory, agent, "Our dog's name: Biscuit", "pets")
    assert result.outcome == "kept" and store.require(first).reinforcement_count == 2


async def test_the_dream_backfill_embeds_what_lacks_a_vector_and_clusters_by_cosine(
    memory, embedder, llm
):
    agent = f"e-{uuid.uuid4().hex[:6]}"
    store = FileMemoryStore(memory.settings.data_dir, agent)
    hound = store.create("The family hound is called Biscuit", category="pets")
    dog = store.create("Our dog's name: Biscuit", category="pets")
    other = store.create("Quarterly invoice from Contoso, due Friday", category="finance")
    llm.default = Reply(json.dumps({"toDelete": [], "toSave": []}))
    result: DreamResult = await memory.client.execute_workflow(
        Dream.run,
        DreamInput(agent_id=agent),
        id=f"dream-{agent}",
        task_queue=memory.task_queue,
        result_type=DreamResult,
    )
    assert result.embeddings.embedded == 3 and result.embeddings.dim == embedder.dim
    for entry in (hound, dog, other):
        assert vector_path(store.embeddings_dir, entry.id).exists()
    prompt = llm.requests[0]["messages"][1]["content"]
    hints = prompt.split("Likely duplicates", 1)[1].splitlines()[1:]
    # Two words in common of nine: Jaccard leaves them apart; cosine puts them together.
    assert f"- {', '.join(sorted([hound.id, dog.id]))}" in hints


async def test_without_an_embedding_model_the_dream_says_so_and_goes_on(memory):
    agent = f"e-{uuid.uuid4().hex[:6]}"
    FileMemoryStore(memory.settings.data_dir, agent).create("The user lives in Chicago")
    result: DreamResult = await memory.client.execute_workflow(
        Dream.run,
        DreamInput(agent_id=agent),
        id=f"dream-{agent}",
        task_queue=memory.task_queue,
        result_type=DreamResult,
    )
    assert result.embeddings.skipped == "no embedding model configured: keyword search only"
    assert result.embeddings.embedded == 0 and result.consolidation.total == 1
