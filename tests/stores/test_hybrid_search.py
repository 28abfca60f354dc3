"""Hybrid search over real HTTP: a scripted /v1/embeddings server on 127.0.0.1."""

from __future__ import annotations

import numpy as np
import pytest

from dreamkeeper.stores.embedding_client import EmbeddingClient, EmbeddingSettings
from dreamkeeper.stores.embeddings import embed_entries
from dreamkeeper.stores.memory_store import FileMemoryStore
from dreamkeeper.stores.search import search
from dreamkeeper.stores.vectors import HEADER_BYTES, read_vector, vector_path


@pytest.fixture
def hybrid(tmp_path, clock, embedding_client) -> FileMemoryStore:
    return FileMemoryStore(tmp_path, "agent-1", clock=clock, embeddings=embedding_client)


def _ids(hits) -> list[str]:
    return [h.entry.id for h in hits]


def test_a_related_entry_with_no_shared_keyword_is_found_by_hybrid_not_bm25(hybrid, tmp_path, clock):
    rex = hybrid.create("The family hound is called Rex", category="pets")
    bill = hybrid.create("Quarterly invoice from Contoso is due Friday", category="finance")
    assert sorted(embed_entries(hybrid, hybrid.embeddings).embedded) == sorted([rex.id, bill.id])
    assert _ids(search(hybrid, "puppy")) == [rex.id]
    keywords_only = FileMemoryStore(tmp_path, "agent-1", clock=clock)
    assert search(keywords_only, "puppy") == []


def test_the_similarity_threshold_excludes_weak_matches(hybrid):
    weak = hybrid.create(
        "Invoice for the automobile service, the clinic visit, the espresso machine and the "
        "dog sitter", category="finance",
    )  # fmt: skip
    strong = hybrid.create("Our puppy Biscuit", category="pets")
    embed_entries(hybrid, hybrid.embeddings)
    query = hybrid.embeddings.embed_query("canine")
    weak_vector = read_vector(hybrid.embeddings_dir, weak.id, weak.fingerprint,
                              hybrid.embeddings.model_key)  # fmt: skip
    weak_cos = float(weak_vector @ query / np.linalg.norm(weak_vector) / np.linalg.norm(query))
    assert 0 < weak_cos < 0.5  # related, but too weakly to count
    assert _ids(search(hybrid, "canine")) == [strong.id]


def test_hybrid_score_is_the_mean_of_normalized_bm25_and_cosine_times_importance(hybrid):
    both = hybrid.create("Biscuit the puppy sleeps a lot", category="pets", importance=1.0)
    keyword = hybrid.create("Biscuit brand crackers for the office party", category="food")
    for i in range(8):  # a corpus where both terms are rare, so BM25 scores are positive
        hybrid.create(f"Unrelated note number {i} about the garden", category="notes")
    embed_entries(hybrid, hybrid.embeddings)
    hits = {h.entry.id: h.score for h in search(hybrid, "biscuit puppy")}
    query = hybrid.embeddings.embed_query("biscuit puppy")
    index = hybrid.vectors(query.size)
    cos = float(index.get(both.id) @ (query / np.linalg.norm(query)))
    base = hybrid.index().scores(["biscuit", "puppy"])
    slot_both, slot_kw = hybrid.index().slot(both.id), hybrid.index().slot(keyword.id)
    top = max(base[slot_both], base[slot_kw])
    assert hits[both.id] == pytest.approx((base[slot_both] / top + cos) / 2 * 1.0)
    keyword_cos = float(index.get(keyword.id) @ (query / np.linalg.norm(query)))
    expected = base[slot_kw] / top
    if keyword_cos >= 0.5:
        expected = (expected + keyword_cos) / 2
    assert hits[keyword.id] == pytest.approx(expected * (0.5 + 0.5 * 0.5))


def test_endpoint_down_gives_bm25_results_and_no_error(hybrid, embedder):
    chicago = hybrid.create("The user lives in Chicago", category="places")
    embedder.down = True
    assert _ids(search(hybrid, "chicago")) == [chicago.id]
    assert search(hybrid, "metropolis") == []
    assert len(embedder.requests) == 1  # one try, then searches stop asking for a while
    embedder.requests.clear()
    report = embed_entries(hybrid, hybrid.embeddings, [chicago.id])
    assert report.failed == [chicago.id] and report.embedded == []
    assert embed_entries(hybrid, hybrid.embeddings).skipped is not None  # backfill waits


def test_a_stale_vector_after_an_edit_is_never_used(hybrid):
    entry = hybrid.create("Our puppy is called Rex", category="pets")
    embed_entries(hybrid, hybrid.embeddings)
    assert _ids(search(hybrid, "canine")) == [entry.id]
    hybrid.update(entry.id, content="Quarterly invoice settled with Contoso")
    assert search(hybrid, "canine") == []  # the old vector describes the old text
    assert embed_entries(hybrid, hybrid.embeddings).embedded == [entry.id]
    assert _ids(search(hybrid, "billing")) == [entry.id]


def test_a_dimension_change_falls_back_then_backfills(hybrid, embedder):
    entry = hybrid.create("Our puppy is called Rex", category="pets")
    embed_entries(hybrid, hybrid.embeddings)
    embedder.dim = 32  # the model behind the endpoint changed
    assert search(hybrid, "canine") == []  # 24-dim vectors are not compared with 32
    assert _ids(search(hybrid, "puppy")) == [entry.id]  # keywords still work
    report = embed_entries(hybrid, hybrid.embeddings)
    assert report.dim == 32 and report.embedded == [entry.id]
    assert _ids(search(hybrid, "canine")) == [entry.id]


def test_a_malformed_vector_file_is_ignored_and_regenerated(hybrid):
    entry = hybrid.create("Our puppy is called Rex", category="pets")
    embed_entries(hybrid, hybrid.embeddings)
    path = vector_path(hybrid.embeddings_dir, entry.id)
    path.write_bytes(path.read_bytes()[: HEADER_BYTES + 8])  # truncated
    reader = FileMemoryStore(hybrid.root.parents[1], "agent-1", embeddings=hybrid.embeddings)
    assert search(reader, "canine") == []
    assert embed_entries(hybrid, hybrid.embeddings).embedded == [entry.id]


def test_a_reader_process_sees_vectors_written_by_the_worker(tmp_path, clock, embedding_client):
    worker = FileMemoryStore(tmp_path, "agent-1", clock=clock, embeddings=embedding_client)
    reader = FileMemoryStore(tmp_path, "agent-1", clock=clock, embeddings=embedding_client)
    entry = worker.create("Our puppy is called Rex", category="pets")
    assert search(reader, "canine") == []  # no vector yet: nothing semantic
    embed_entries(worker, embedding_client)
    assert _ids(search(reader, "canine")) == [entry.id]  # via the journal, no reload


def test_archived_entries_leave_hybrid_results(hybrid):
    entry = hybrid.create("Our puppy is called Rex", category="pets")
    embed_entries(hybrid, hybrid.embeddings)
    hybrid.archive(entry.id, "deleted by agent tool")
    assert search(hybrid, "canine") == []
    assert _ids(search(hybrid, "canine", include_archived=True)) == [entry.id]


def test_the_client_batches_truncates_and_bounds_retries(embedder):
    client = EmbeddingClient(EmbeddingSettings(base_url=embedder.base_url, max_input_chars=100))
    vectors = client.embed([f"text {i} " + "x" * 500 for i in range(70)])
    assert all(v is not None and v.shape == (24,) for v in vectors)
    assert [len(b["input"]) for b in embedder.requests] == [64, 6]
    assert max(len(t) for t in embedder.inputs) == 100
    embedder.requests.clear()
    embedder.down = True
    assert client.embed(["a"]) == [None]
    assert len(embedder.requests) == 3  # one try and two retries, then give up
    embedder.requests.clear()
    embedder.down, embedder.status = False, 400
    assert client.embed(["a"]) == [None] and len(embedder.requests) == 1  # refused: no retry
    client.close()


def test_an_unreachable_endpoint_is_no_vector(tmp_path, clock):
    client = EmbeddingClient(EmbeddingSettings(base_url="http://127.0.0.1:9/v1", timeout_seconds=1,
                                               query_timeout_seconds=1))  # fmt: skip
    store = FileMemoryStore(tmp_path, "agent-1", clock=clock, embeddings=client)
    entry = store.create("The user lives in Chicago")
    assert _ids(search(store, "chicago")) == [entry.id]
    client.close()


def test_working_memory_search_is_hybrid_and_vectors_follow_their_entries(
    tmp_path, clock, embedding_client, embedder
):
    from dreamkeeper.stores.working_memory import WorkingMemoryStore
    from dreamkeeper.stores.working_vectors import vector_name

    working = WorkingMemoryStore(tmp_path, "agent-1", clock=clock, embeddings=embedding_client)
    working.save("session/s1", "pets", "Biscuit the puppy needs a vet visit on Tuesday")
    working.save("session/s1", "bills", "Contoso quarterly statement, 4 pages")
    working.wait_for_embeddings(timeout=10)
    assert [e.key for e, _ in working.search("canine")] == ["session/s1/pets"]
    assert [e.key for e, _ in working.search("contoso")] == ["session/s1/bills"]
    keywords_only = WorkingMemoryStore(tmp_path, "agent-1", clock=clock)
    assert keywords_only.search("canine") == []
    vector = working.root / ".embeddings" / f"{vector_name('session/s1/pets')}.bin"
    assert vector.exists()
    working.delete("session/s1/pets")
    assert not vector.exists()  # deleted with its entry
    embedder.down = True
    assert [e.key for e, _ in working.search("contoso statement")] == ["session/s1/bills"]


def test_entries_with_a_current_vector_are_not_embedded_again(hybrid, embedder):
    first = hybrid.create("Our puppy is called Rex", category="pets")
    assert embed_entries(hybrid, hybrid.embeddings).embedded == [first.id]
    second = hybrid.create("The clinic moved to Elm Street", category="health")
    embedder.requests.clear()
    report = embed_entries(hybrid, hybrid.embeddings, [first.id, second.id])
    assert report.embedded == [second.id] and report.fresh == 1
    assert embedder.inputs == ["The clinic moved to Elm Street"]
