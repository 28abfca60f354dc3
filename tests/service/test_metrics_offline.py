"""Without a server: the dashboard queries exported metrics, the embedding backlog gauge,
and the remote client's imports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import generate_latest

from dreamkeeper.service.metrics import ServiceMetrics
from dreamkeeper.stores.files.memory_store import FileMemoryStore

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "dreamkeeper.json"


def test_every_dreamkeeper_metric_on_the_dashboard_is_exported(tmp_path):
    store = FileMemoryStore(tmp_path, "a1")
    store.create("one fact")
    metrics = ServiceMetrics()
    metrics.watch_stores(lambda: ["a1"], lambda agent: store)
    metrics.saves.labels("saved").inc()
    metrics.save_results.labels("kept").inc()
    metrics.search_seconds.observe(0.001)
    metrics.context_seconds.observe(0.001)
    metrics.tool_calls.labels("search_memory").inc()
    metrics.dreams.labels("completed").inc()
    metrics.dream_items.labels("merged").inc()
    exported = generate_latest(metrics.registry).decode()
    names = set(re.findall(r"^(dreamkeeper_[a-z_]+)", exported, flags=re.M))
    assert 'dreamkeeper_store_entries{agent="a1",state="live"} 1.0' in exported

    panels = json.loads(DASHBOARD.read_text())["panels"]
    queried = {
        name
        for panel in panels
        for target in panel["targets"]
        for name in re.findall(r"dreamkeeper_[a-z_]+", target["expr"])
    }
    assert queried and queried <= names, queried - names


def test_embedding_backlog_counts_live_entries_without_a_vector(tmp_path, embedding_client):
    from dreamkeeper.stores.vectors.backfill import embed_entries

    store = FileMemoryStore(tmp_path, "a1", embeddings=embedding_client)
    first = store.create("first fact about cats")
    embed_entries(store, embedding_client, [first.id])
    store.create("second fact about dogs")
    store.create("third fact about birds")
    metrics = ServiceMetrics()
    metrics.watch_stores(lambda: ["a1"], lambda agent: store, embeddings=True)
    exported = generate_latest(metrics.registry).decode()
    assert 'dreamkeeper_embedding_backlog{agent="a1"} 2.0' in exported
    embed_entries(store, embedding_client)
    exported = generate_latest(metrics.registry).decode()
    assert 'dreamkeeper_embedding_backlog{agent="a1"} 0.0' in exported


def test_the_remote_client_loads_no_server_side_code():
    import subprocess
    import sys

    code = (
        "import sys; from dreamkeeper import RemoteMemoryClient, connect_memory; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('fastapi', 'uvicorn', 'mcp', 'prometheus_client') or m.startswith("
        "('dreamkeeper.worker', 'dreamkeeper.workflows', 'dreamkeeper.activities'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"
