"""`dreamkeeper serve` on a database whose server stops and starts again: during the
outage every request that needs the database is a 503 problem with Retry-After (never a
plain 500), liveness keeps answering and says the database is down, readiness and the
database-up gauge say so too; once the server is back the same serve answers normally —
no restart. Our own throwaway PostgreSQL server, a real serve process."""

from __future__ import annotations

import httpx
import pytest

from dreamkeeper.policies.access import Access
from dreamkeeper.service.problems import PROBLEM_JSON, RETRY_AFTER_SECONDS
from dreamkeeper.stores.postgres.database import Database, describe
from dreamkeeper.stores.postgres.migrations import upgrade
from dreamkeeper.stores.postgres.tokens import PostgresTokenStore
from dreamkeeper.stores.tokens import issue
from tests.harness.postgres import PostgresCluster, find_bindir
from tests.service.conftest import start_serve, stop_serve

ENTRY = "0123456789ab"
NOTE = "The deploy window is Tuesday 14:00."
LATER = "Release notes go out Friday."


@pytest.fixture
def cluster():
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries")  # the session fixture reports it in CI
    cluster = PostgresCluster(bindir)
    cluster.start()
    yield cluster
    cluster.destroy()


def _requests(kept: str) -> list[tuple[str, str, dict | None]]:
    """One request of each kind that needs the database."""
    return [
        ("POST", "/v1/agents/a1/search", {"query": "deploy window"}),
        ("GET", f"/v1/agents/a1/memories/{kept}", None),
        ("GET", "/v1/agents/a1/archived", None),
        ("POST", "/v1/agents/a1/context", {"session": "s1", "message": "when do we deploy?"}),
        ("PUT", "/v1/agents/a1/working", {"namespace": "session/s1", "key": "k", "value": "v"}),
        ("GET", "/v1/agents", None),
        ("POST", "/v1/agents/a1/memories", {"content": LATER, "entry_id": ENTRY}),
    ]


def _save_until_durable(http: httpx.Client, body: dict) -> httpx.Response:
    """A save as its caller is told to make it: the save the outage refused is still
    retrying its first step (with the activity's backoff) when the database is back, so
    serve may answer "queued but not yet durable ... call again with entry_id"; called
    again, as told, until it is durable (each call waits up to the save timeout)."""
    for _ in range(40):
        answer = http.post("/v1/agents/a1/memories", json=body, timeout=120)
        if answer.status_code != 503 or "call again" not in answer.text:
            return answer
    return answer


def _gauge(http: httpx.Client) -> float:
    text = http.get("/metrics").text
    [line] = [x for x in text.splitlines() if x.startswith("dreamkeeper_database_up ")]
    return float(line.split()[1])


def test_serve_answers_503_with_retry_after_during_an_outage_and_recovers_without_a_restart(
    temporal_env, tmp_path, cluster
):
    url = cluster.create_database("dk_serve_outage")
    db = Database(url, max_size=1)
    upgrade(db)
    _, issued = issue(PostgresTokenStore(db), "bot", ["a1"], Access.WRITE)
    db.close()
    served = start_serve(
        temporal_env,
        tmp_path,
        DREAMKEEPER_DATABASE_URL=url,
        DREAMKEEPER_SAVE_TIMEOUT_SECONDS="3",
    )
    try:
        with served.client() as http:  # the shared token (DREAMKEEPER_SERVE_TOKEN)
            kept = http.post("/v1/agents/a1/memories", json={"content": NOTE})
            assert kept.status_code == 201, kept.text
            kept_id = kept.json()["entry_id"]
            assert http.get("/v1/health").json()["database"] == "up"
            assert http.get("/v1/ready").json() == {"ready": True}
            assert _gauge(http) == 1.0

            cluster.stop()
            for method, path, body in _requests(kept_id):
                answer = http.request(method, path, json=body)
                assert answer.status_code == 503, (path, answer.status_code, answer.text)
                assert answer.headers["content-type"] == PROBLEM_JSON
                assert answer.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
                problem = answer.json()
                assert problem["status"] == 503 and problem["category"] == "DatabaseUnavailable"
                assert describe(url) in problem["detail"], (path, problem)
            for token in (issued, None):  # what the token store would decide: nobody
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                refused = httpx.post(
                    f"{served.url}/v1/agents/a1/search", json={"query": "x"}, headers=headers
                )
                assert refused.status_code == 503 and refused.headers["retry-after"]
            # Liveness keeps answering, readiness and the gauge say the database is down.
            assert httpx.get(f"{served.url}/v1/health").json()["database"] == "down"
            ready = httpx.get(f"{served.url}/v1/ready")
            assert ready.status_code == 503 and ready.headers["retry-after"]
            assert "127.0.0.1" not in ready.text  # open to anyone: no host, no user
            assert _gauge(http) == 0.0

            cluster.start()  # the same serve process, never restarted
            assert httpx.get(f"{served.url}/v1/ready").json() == {"ready": True}
            assert httpx.get(f"{served.url}/v1/health").json()["database"] == "up"
            found = http.post("/v1/agents/a1/search", json={"query": "deploy window"})
            assert found.status_code == 200 and found.json()["hits"][0]["entry"]["id"] == kept_id
            assert http.get(f"/v1/agents/a1/memories/{kept_id}").json()["content"] == NOTE
            again = _save_until_durable(http, {"content": LATER, "entry_id": ENTRY})
            assert again.status_code == 201, again.text  # the save refused during the outage
            assert http.get(f"/v1/agents/a1/memories/{ENTRY}").json()["content"] == LATER
            reached = httpx.get(
                f"{served.url}/v1/agents/a1/archived", headers={"Authorization": f"Bearer {issued}"}
            )
            assert reached.status_code == 200
            assert _gauge(http) == 1.0
    finally:
        stop_serve(served)
