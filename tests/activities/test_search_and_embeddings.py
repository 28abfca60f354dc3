"""Search and the embedding step at the activity boundary, with the scripted
embedder's vectors in process."""

from __future__ import annotations

import pytest

from dreamkeeper.activities.embeddings import NOT_CONFIGURED, EmbeddingActivities
from dreamkeeper.activities.search import SearchActivities
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.payloads import EmbedInput, SearchInput
from tests.activities.conftest import AGENT, ConceptEmbedder

NOTES = [
    "The family hound is called Biscuit.",
    "The user drives a blue sedan to work.",
    "Invoices go to billing@example.com.",
]


def seeded(tmp_path, embedder: ConceptEmbedder | None = None) -> tuple[StoreRegistry, list[str]]:
    registry = StoreRegistry(tmp_path, embeddings=embedder)
    with registry.using(AGENT) as store:
        ids = [store.create(note).id for note in NOTES]
    return registry, ids


def test_search_answers_from_the_store_and_names_the_store_it_ran_on(run, tmp_path):
    registry, ids = seeded(tmp_path)
    out = run(SearchActivities(registry).search_memory, SearchInput(agent_id=AGENT, query="sedan"))
    assert [h.entry.id for h in out.hits] == [ids[1]]
    assert out.served_by == registry.identity.store_id


def test_without_a_model_the_step_is_skipped_not_failed(run, tmp_path):
    registry, _ = seeded(tmp_path)
    done = run(EmbeddingActivities(registry).embed_entries, EmbedInput(agent_id=AGENT))
    assert done.skipped == NOT_CONFIGURED and done.embedded == 0


def test_embedding_writes_each_vector_once_and_reports_progress(run, tmp_path):
    embedder = ConceptEmbedder()
    registry, ids = seeded(tmp_path, embedder)
    step = EmbeddingActivities(registry).embed_entries
    first = run(step, EmbedInput(agent_id=AGENT))
    assert (first.embedded, first.failed, first.fresh, first.dim) == (3, 0, 0, embedder.dim)
    assert run.beats[-1] == ("3/3 embedded",)
    retry = run(step, EmbedInput(agent_id=AGENT))
    assert (retry.embedded, retry.fresh) == (0, 3)  # a retry finds the vectors written
    with registry.using(AGENT) as store:
        index = store.vectors(embedder.dim)
        assert index is not None and all(index.get(i) is not None for i in ids)
    # Found by meaning: no word of the query is in the note.
    out = run(SearchActivities(registry).search_memory, SearchInput(agent_id=AGENT, query="puppy"))
    assert out.hits[0].entry.id == ids[0]


def test_an_endpoint_that_does_not_answer_is_a_retryable_failure(run, tmp_path):
    """Vectors are never the caller's wait: the step is retried, then the backfill of
    the next dream cycle catches up; keyword search works meanwhile."""
    registry, _ = seeded(tmp_path, ConceptEmbedder(down=True))
    failure = run.fails(EmbeddingActivities(registry).embed_entries, EmbedInput(agent_id=AGENT))
    assert failure.type == "EmbeddingsUnavailable" and not failure.non_retryable


@pytest.mark.parametrize("down", [False, True])
def test_named_ids_are_embedded_or_counted_failed(run, tmp_path, down):
    registry, ids = seeded(tmp_path, ConceptEmbedder(down=down))
    step = EmbeddingActivities(registry).embed_entries
    done = run(step, EmbedInput(agent_id=AGENT, ids=[ids[0], "0123456789ab"]))
    assert (done.embedded, done.failed) == ((0, 1) if down else (1, 0))
