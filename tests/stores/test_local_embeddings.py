"""The in-process embedding backend with the real bundled model (the local-embeddings
extra, which the test environment installs): no server, no PyTorch, no download."""

from __future__ import annotations

import numpy as np
import pytest

from dreamkeeper.core.errors import SettingsError
from dreamkeeper.core.settings import EmbeddingSettings, embedding_settings
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.search.query import search
from dreamkeeper.stores.vectors.embedding_client import EmbeddingClient, embedding_client
from dreamkeeper.stores.vectors.local_embeddings import (
    DIMENSION,
    LOCAL_MODEL,
    LocalEmbeddings,
    LocalModelMissing,
    local_available,
    local_model_files,
)

needs_model = pytest.mark.skipif(
    not local_available(), reason="local-embeddings extra not installed"
)


@pytest.fixture(scope="module")
def local() -> LocalEmbeddings:
    return LocalEmbeddings()


@needs_model
def test_the_model_ships_inside_installed_packages():
    model, tokenizer = local_model_files()
    assert model.name == "model.onnx" and model.stat().st_size > 20_000_000
    assert tokenizer.name == "tokenizer.json" and "site-packages" in str(model)


@needs_model
def test_vectors_are_unit_length_and_close_in_meaning(local):
    dog, puppy, invoice = local.embed(["My dog loves long walks", "a puppy", "Quarterly invoice"])
    assert dog.shape == (DIMENSION,) and np.linalg.norm(dog) == pytest.approx(1.0, abs=1e-5)
    assert float(dog @ puppy) > float(dog @ invoice) + 0.2
    again = local.embed_query("a puppy")
    assert local.embed_query("a puppy") is again  # cached
    np.testing.assert_allclose(again, puppy, atol=1e-5)  # batch and single agree


@needs_model
def test_a_store_with_the_local_backend_searches_hybrid(tmp_path, clock, local):
    from dreamkeeper.stores.vectors.backfill import embed_entries

    store = FileMemoryStore(tmp_path, "agent-1", clock=clock, embeddings=local)
    dog = store.create("Our dog Rex sleeps on the sofa all afternoon", category="pets")
    store.create("The invoice from Contoso is due Friday", category="finance")
    assert sorted(embed_entries(store, local).embedded) == sorted(e.id for e in store.entries())
    assert [h.entry.id for h in search(store, "puppy naps")][:1] == [dog.id]
    assert search(FileMemoryStore(tmp_path, "agent-1", clock=clock), "puppy naps") == []


@needs_model
def test_auto_picks_the_local_model_when_no_endpoint_is_set():
    settings = embedding_settings({})
    assert settings.local and settings.base_url is None and settings.model == LOCAL_MODEL
    assert isinstance(embedding_client(settings), LocalEmbeddings)
    http = embedding_settings({"DREAMKEEPER_EMBEDDING_BASE_URL": "http://127.0.0.1:9/v1"})
    assert not http.local and isinstance(embedding_client(http), EmbeddingClient)
    assert embedding_client(embedding_settings({"DREAMKEEPER_EMBEDDING_BACKEND": "none"})) is None
    assert embedding_settings({"DREAMKEEPER_EMBEDDING_BACKEND": "local"}).local


def test_backend_settings_are_checked(monkeypatch):
    with pytest.raises(SettingsError, match="DREAMKEEPER_EMBEDDING_BACKEND"):
        embedding_settings({"DREAMKEEPER_EMBEDDING_BACKEND": "gpu"})
    with pytest.raises(SettingsError, match="needs DREAMKEEPER_EMBEDDING_BASE_URL"):
        embedding_settings({"DREAMKEEPER_EMBEDDING_BACKEND": "http"})
    import dreamkeeper.core.settings as settings_module

    monkeypatch.setattr(settings_module, "local_embeddings_installed", lambda: False)
    assert not embedding_settings({}).configured  # auto without the extra: keywords only
    with pytest.raises(SettingsError, match="local-embeddings"):
        embedding_settings({"DREAMKEEPER_EMBEDDING_BACKEND": "local"})


def test_without_the_model_embedding_fails_soft(monkeypatch):
    import dreamkeeper.stores.vectors.local_embeddings as local_module

    monkeypatch.setattr(local_module, "local_model_files", lambda: None)
    monkeypatch.setattr(local_module, "_SHARED", None)  # as in a process that never loaded it
    backend = LocalEmbeddings(EmbeddingSettings())
    assert backend.embed(["text"]) == [None]  # logged; callers fall back to keywords
    assert backend.embed_query("text") is None
    with pytest.raises(LocalModelMissing):
        backend._model()


@needs_model
def test_embed_server_serves_the_local_model_over_http():
    import threading

    from dreamkeeper.service.embedding_server import local_encoder, make_server

    server = make_server(local_encoder(), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        client = EmbeddingClient(EmbeddingSettings(base_url=url, model=LOCAL_MODEL))
        over_http = client.embed(["a puppy"])[0]
        np.testing.assert_allclose(over_http, LocalEmbeddings().embed(["a puppy"])[0], atol=1e-5)
        assert client.model_key == LocalEmbeddings().model_key  # the two paths share vectors
        client.close()
    finally:
        server.shutdown()
        server.server_close()


def test_every_instance_in_a_process_shares_one_loaded_model():
    """The worker's activities and an in-process client must not each hold a copy."""
    first, second = LocalEmbeddings(EmbeddingSettings()), LocalEmbeddings(EmbeddingSettings())
    assert first._model() is second._model()
