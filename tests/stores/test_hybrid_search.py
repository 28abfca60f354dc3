"""Hybrid search over real HTTP: a scripted /v1/embeddings server on 127.0.0.1."""

from __future__ import annotations

import numpy as np
import pytest

from dreamkeeper.core.settings import EmbeddingSettings
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.vector_files import read_vector, vector_path, write_vector
from dreamkeeper.stores.search.bm25 import K1, query_terms
from dreamkeeper.stores.search.fusion import semantic_evidence
from dreamkeeper.stores.search.query import search
from dreamkeeper.stores.vectors.backfill import embed_entries
from dreamkeeper.stores.vectors.embedding_client import EmbeddingClient
from dreamkeeper.stores.vectors.vectors import HEADER_BYTES


@pytest.fixture
def file_hybrid(tmp_path, clock, embedding_client) -> FileMemoryStore:
    return FileMemoryStore(tmp_path, "agent-1", clock=clock, embeddings=embedding_client)


@pytest.fixture
def hybrid(long_term, embedding_client) -> MemoryStore:
    """A store with embeddings on each long_term."""
    return long_term.open(embeddings=embedding_client)


def _ids(hits) -> list[str]:
    return [h.entry.id for h in hits]


def test_a_related_entry_with_no_shared_keyword_is_found_by_hybrid_not_bm25(hybrid, long_term):
    rex = hybrid.create("The family hound is called Rex", category="pets")
    bill = hybrid.create("Quarterly invoice from Contoso is due Friday", category="finance")
    assert sorted(embed_entries(hybrid, hybrid.embeddings).embedded) == sorted([rex.id, bill.id])
    assert _ids(search(hybrid, "puppy")) == [rex.id]
    keywords_only = long_term.open()
    assert search(keywords_only, "puppy") == []


def test_the_similarity_threshold_excludes_weak_matches(file_hybrid):
    weak = file_hybrid.create(
        "Invoice for the automobile service, the clinic visit, the espresso machine and the "
        "dog sitter",
        category="finance",
    )
    strong = file_hybrid.create("Our puppy Biscuit", category="pets")
    embed_entries(file_hybrid, file_hybrid.embeddings)
    query = file_hybrid.embeddings.embed_query("canine")
    weak_vector = read_vector(
        file_hybrid.embeddings_dir, weak.id, weak.fingerprint, file_hybrid.embeddings.model_key
    )
    weak_cos = float(weak_vector @ query / np.linalg.norm(weak_vector) / np.linalg.norm(query))
    assert 0 < weak_cos < 0.5  # related, but too weakly to count
    assert _ids(search(file_hybrid, "canine")) == [strong.id]


def test_hybrid_score_is_lexical_plus_semantic_evidence_times_the_boosts(hybrid):
    both = hybrid.create("Biscuit the puppy sleeps a lot", category="pets", importance=1.0)
    keyword = hybrid.create("Biscuit brand crackers for the office party", category="food")
    for i in range(8):
        hybrid.create(f"Unrelated note number {i} about the garden", category="notes")
    embed_entries(hybrid, hybrid.embeddings)
    hits = {h.entry.id: h.score for h in search(hybrid, "biscuit puppy")}
    query = hybrid.embeddings.embed_query("biscuit puppy")
    index = hybrid.vectors(query.size)
    unit = query / np.linalg.norm(query)
    population = np.array([float(index.get(e.id) @ unit) for e in hybrid.entries()])
    base = hybrid.index().scores(query_terms("biscuit puppy"))
    # "Biscuit the puppy": the query's phrase, "the" being no word of the index.
    for entry, importance, phrase in ((both, 1.0, 2.0), (keyword, 0.5, 1.0)):
        cos = np.array([float(index.get(entry.id) @ unit)])
        lexical = phrase * base[hybrid.index().slot(entry.id)] / (K1 + 1)
        expected = lexical + semantic_evidence(cos, population, query.size)[0]
        assert hits[entry.id] == pytest.approx(expected * (0.9 + 0.2 * importance))
    assert list(hits)[0] == both.id


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


def test_a_malformed_vector_file_is_ignored_and_regenerated(file_hybrid):
    entry = file_hybrid.create("Our puppy is called Rex", category="pets")
    embed_entries(file_hybrid, file_hybrid.embeddings)
    path = vector_path(file_hybrid.embeddings_dir, entry.id)
    path.write_bytes(path.read_bytes()[: HEADER_BYTES + 8])  # truncated
    reader = FileMemoryStore(
        file_hybrid.root.parents[1], "agent-1", embeddings=file_hybrid.embeddings
    )
    assert search(reader, "canine") == []
    assert embed_entries(file_hybrid, file_hybrid.embeddings).embedded == [entry.id]


def test_a_reader_process_sees_vectors_written_by_the_worker(long_term, embedding_client):
    worker = long_term.open(embeddings=embedding_client)
    reader = long_term.open(embeddings=embedding_client)
    entry = worker.create("Our puppy is called Rex", category="pets")
    assert search(reader, "canine") == []  # no vector yet: nothing semantic
    embed_entries(worker, embedding_client)
    assert _ids(search(reader, "canine")) == [entry.id]  # via the feed, no reload


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
    client = EmbeddingClient(
        EmbeddingSettings(
            base_url="http://127.0.0.1:9/v1", timeout_seconds=1, query_timeout_seconds=1
        )
    )
    store = FileMemoryStore(tmp_path, "agent-1", clock=clock, embeddings=client)
    entry = store.create("The user lives in Chicago")
    assert _ids(search(store, "chicago")) == [entry.id]
    client.close()


def _has_vector(working, key: str) -> bool:
    """A stored vector for `key` (a file, or a row on PostgreSQL)."""
    from dreamkeeper.stores.vectors.working_vectors import vector_name

    if hasattr(working, "db"):
        stored = working.storage.stored_key(working.storage.tier_key(), key)  # a tag, if sealed
        with working.db.transaction() as conn:
            row = conn.execute(
                "SELECT 1 FROM dreamkeeper_working_vectors WHERE key = %s", (stored,)
            ).fetchone()
        return row is not None
    return (working.root / ".embeddings" / f"{vector_name(key)}.bin").exists()


def test_working_memory_search_is_hybrid_and_vectors_follow_their_entries(
    make_working, embedding_client, embedder
):
    working = make_working("agent-1", embeddings=embedding_client)
    working.save("session/s1", "pets", "Biscuit the puppy needs a vet visit on Tuesday")
    working.save("session/s1", "bills", "Contoso quarterly statement, 4 pages")
    working.wait_for_embeddings(timeout=10)
    assert [e.key for e, _ in working.search("canine")] == ["session/s1/pets"]
    assert [e.key for e, _ in working.search("contoso")] == ["session/s1/bills"]
    keywords_only = make_working("agent-1")
    assert keywords_only.search("canine") == []
    assert _has_vector(working, "session/s1/pets")
    working.delete("session/s1/pets")
    assert not _has_vector(working, "session/s1/pets")  # deleted with its entry
    embedder.down = True
    assert [e.key for e, _ in working.search("contoso statement")] == ["session/s1/bills"]


def test_a_forget_erases_a_working_entry_with_its_vector_and_keeps_the_others(
    make_working, embedding_client
):
    working = make_working("agent-1", embeddings=embedding_client)
    working.save("session/s1", "pets", "Biscuit the puppy needs a vet visit on Tuesday")
    working.save("session/s1", "bills", "Contoso quarterly statement, 4 pages")
    working.wait_for_embeddings(timeout=10)
    # On PostgreSQL the entry's vector row goes in the erase's own transaction: nothing
    # else may wait on that row while the transaction is open.
    assert working.erase_matching(lambda text: "Biscuit" in text) == ["session/s1/pets"]
    assert not _has_vector(working, "session/s1/pets")
    assert _has_vector(working, "session/s1/bills")
    assert [e.key for e, _ in working.search("canine")] == []
    assert [e.key for e, _ in working.search("contoso")] == ["session/s1/bills"]


def test_entries_with_a_current_vector_are_not_embedded_again(hybrid, embedder):
    first = hybrid.create("Our puppy is called Rex", category="pets")
    assert embed_entries(hybrid, hybrid.embeddings).embedded == [first.id]
    second = hybrid.create("The clinic moved to Elm Street", category="health")
    embedder.requests.clear()
    report = embed_entries(hybrid, hybrid.embeddings, [first.id, second.id])
    assert report.embedded == [second.id] and report.fresh == 1
    assert embedder.inputs == ["The clinic moved to Elm Street"]


# -- fusion with scripted vectors: the cosines are exactly what the test says -----------

DIM = 8


def _direction(*weights: float) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[: len(weights)] = weights
    return vector


def _with_cosine(cos: float, other: int = 1) -> np.ndarray:
    """A vector whose cosine with the query (axis 0) is `cos`."""
    vector = np.zeros(DIM, dtype=np.float32)
    vector[0], vector[other] = cos, float(np.sqrt(max(0.0, 1 - cos * cos)))
    return vector


@pytest.fixture
def scripted(tmp_path, clock):
    client = EmbeddingClient(EmbeddingSettings(base_url="http://127.0.0.1:9/v1", model="scripted"))
    store = FileMemoryStore(tmp_path, "agent-1", clock=clock, embeddings=client)

    def add(content: str, vector: np.ndarray, **kw):
        entry = store.create(content, **kw)
        write_vector(store.embeddings_dir, entry.id, vector, entry.fingerprint, client.model_key)
        return entry

    yield store, add
    client.close()


def test_a_common_word_shared_with_many_entries_does_not_demote_a_strong_semantic_match(scripted):
    store, add = scripted
    query, text = _direction(1.0), "weekly canine appointments"
    fillers = [
        add(f"weekly report {i}", _with_cosine(0.05 * (i % 4), 2 + i % 6)) for i in range(30)
    ]
    # The best match in meaning also says "weekly" — in a long entry, so its BM25 is low.
    strong = add(
        "Biscuit goes to the vet every weekly slot we can book, with treats, a lead, "
        "his blanket, the insurance card and the vaccination booklet",
        _with_cosine(0.8),
    )
    weaker = add("Our dog sleeps a lot", _with_cosine(0.7, 3))  # no shared word at all
    hits = search(store, text, query_vector=query)
    assert [h.entry.id for h in hits[:2]] == [strong.id, weaker.id]
    assert {h.entry.id for h in hits[2:]} <= {f.id for f in fillers}
    # The old rule (mean of BM25 / top BM25 and cosine) put the weaker match first.
    base = store.index().scores(query_terms(text))
    top = max(base[store.index().slot(e.id)] for e in [*fillers, strong])
    old_strong = (base[store.index().slot(strong.id)] / top + 0.8) / 2
    assert old_strong < 0.7


def test_a_second_leg_only_adds(scripted):
    store, add = scripted
    for i in range(20):
        add(f"garden note {i}", _with_cosine(0.1, 2 + i % 6))
    plain = add("tomato seedlings", _with_cosine(0.6))
    shared = add("tomato seedlings garden", _with_cosine(0.6))
    hits = {
        h.entry.id: h.score for h in search(store, "garden planting", query_vector=_direction(1.0))
    }
    assert hits[shared.id] > hits[plain.id] > 0


def test_a_semantic_candidate_below_the_minimum_similarity_still_needs_a_keyword(scripted):
    store, add = scripted
    for i in range(10):
        add(f"filler {i}", _with_cosine(0.0, 2 + i % 6))
    weak = add("unrelated words only", _with_cosine(0.45))
    keyword = add("the lighthouse keeper", _with_cosine(0.3))
    found = {h.entry.id for h in search(store, "lighthouse", query_vector=_direction(1.0))}
    assert keyword.id in found and weak.id not in found  # 0.45 < 0.5: not a candidate


def test_importance_and_recency_are_bounded_boosts(scripted, clock):
    store, add = scripted
    for i in range(10):
        add(f"filler {i}", _with_cosine(0.0, 2 + i % 6))
    old_important = add("lighthouse keeper log", _with_cosine(0.6), importance=1.0)
    clock.advance(days=365)
    better = add("lighthouse keeper log book", _with_cosine(0.9), importance=0.0)
    hits = {h.entry.id: h.score for h in search(store, "lighthouse", query_vector=_direction(1.0))}
    assert hits[better.id] > hits[old_important.id]  # importance and age cannot outweigh it


@pytest.mark.parametrize("hybrid_mode", [False, True])
def test_ties_come_out_in_the_same_order_after_re_ingestion(tmp_path, clock, hybrid_mode):
    contents = ["alpha one", "alpha two", "alpha six", "alpha ten"]
    orders = []
    for run, ordering in enumerate((contents, contents[::-1])):
        client = EmbeddingClient(EmbeddingSettings(base_url="http://127.0.0.1:9/v1", model="s"))
        store = FileMemoryStore(
            tmp_path / str(run), "agent-1", clock=clock, embeddings=client if hybrid_mode else None
        )
        for i in range(5):
            store.create(f"filler {i}")
        ids = {}
        for content in ordering:  # same instant: the clock does not move
            entry = store.create(content)
            ids[entry.id] = content
            if hybrid_mode:
                write_vector(
                    store.embeddings_dir,
                    entry.id,
                    _with_cosine(0.6),
                    entry.fingerprint,
                    client.model_key,
                )
        hits = search(store, "alpha", query_vector=_direction(1.0) if hybrid_mode else None)
        assert len({h.score for h in hits}) == 1  # all tied
        orders.append([ids[h.entry.id] for h in hits])
        client.close()
    assert orders[0] == orders[1] == sorted(contents)


def test_ties_prefer_the_entry_seen_last(store, clock):
    older = store.create("alpha beta")
    clock.advance(hours=1)
    newer = store.create("alpha gamma")
    assert [h.entry.id for h in search(store, "alpha")] == [newer.id, older.id]
    store.update(older.id, last_seen_at=clock.advance(hours=1))
    assert [h.entry.id for h in search(store, "alpha")] == [older.id, newer.id]


def test_working_memory_fuses_with_the_same_rule(make_working, embedding_client):
    working = make_working("agent-1", embeddings=embedding_client)
    for i in range(6):
        working.save("session/s1", f"note{i}", f"weekly status note {i}")
    working.save("session/s1", "pet", "Biscuit the puppy has a weekly vet visit")
    working.wait_for_embeddings(timeout=10)
    hits = working.search("weekly canine")
    assert hits[0][0].key == "session/s1/pet"
