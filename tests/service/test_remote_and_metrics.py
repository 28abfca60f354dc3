"""`RemoteMemoryClient` and the CLI's `--url` against a running serve, and its metrics
endpoint moving with the traffic."""

from __future__ import annotations

import asyncio
import re
import subprocess
import uuid
from datetime import UTC, datetime

import httpx
import pytest

from dreamkeeper.agent.connect import connect_memory
from dreamkeeper.agent.remote import RemoteMemoryClient
from dreamkeeper.agent.session import SessionContext
from dreamkeeper.core.errors import InvalidInput, NotFound
from dreamkeeper.core.settings import ServiceSettings
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.search.query import search
from tests.service.conftest import DREAMKEEPER


def _agent() -> str:
    return f"r-{uuid.uuid4().hex[:8]}"


async def test_remote_client_has_the_local_clients_calls_and_results(served):
    agent = _agent()
    memory = await connect_memory(ServiceSettings(url=served.url, token=served.token))
    assert isinstance(memory, RemoteMemoryClient)
    me = memory.agent(agent)
    ack = await me.save("User prefers short answers, code first", category="user/style")
    other = await me.save("User lives in Chicago", category="user/location", source="user")
    hits = me.search("short answers")
    local = search(FileMemoryStore(served.data_dir, agent), "short answers")
    assert [h.entry.id for h in hits] == [h.entry.id for h in local] == [ack.entry_id]
    assert hits[0].score == pytest.approx(local[0].score)

    assert (await me.set_importance(other.entry_id, 0.95)).importance == 0.95
    assert (await me.delete(other.entry_id)).archived is True
    assert [e.id for e in memory.archived(agent)] == [e.id for e in me.archived()]
    assert [h.entry.id for h in me.search("chicago", include_archived=True)] == [other.entry_id]
    assert (await me.restore(other.entry_id)).archived is False
    assert memory.get_memory(agent, other.entry_id).importance_score == 0.95
    assert me.get(other.entry_id) == memory.get_memory(agent, other.entry_id)

    tools = me.tools(SessionContext.user("s1"))
    assert len(tools.names) == 7
    text = await tools.call("search_memory", '{"query": "chicago"}')
    assert other.entry_id in text
    context = memory.context(agent, SessionContext.user("s1"), "where does the user live, again?")
    assert other.entry_id in context.recalled
    await memory.aclose()


async def test_remote_errors_are_the_local_errors(served):
    memory = RemoteMemoryClient(served.url, token=served.token)
    with pytest.raises(InvalidInput, match="importance"):
        await memory.save_memory(_agent(), "x", importance=3)
    with pytest.raises(NotFound, match="unknown agent"):
        memory.search_memory(_agent(), "anything")
    unauthorised = RemoteMemoryClient(served.url)
    with pytest.raises(InvalidInput, match="DREAMKEEPER_SERVE_TOKEN"):
        unauthorised.search_memory(_agent(), "anything")
    await memory.aclose()


async def test_dream_through_the_api_is_reported_and_counted(served):
    agent = _agent()
    memory = RemoteMemoryClient(served.url, token=served.token)
    await memory.save_memory(agent, "the build uses make")
    result = await memory.run_dream(agent)
    assert result.agent_id == agent
    status = await memory.dream_status(agent)
    assert status.status == "COMPLETED"
    async with httpx.AsyncClient(base_url=served.url, headers=served.headers) as http:
        text = (await http.get("/metrics")).text
    assert _value(text, 'dreamkeeper_dream_cycles_total{outcome="completed"}') >= 1
    await memory.aclose()


def _cli(served, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in served.env.items() if k != "DREAMKEEPER_DATA"}
    env["DREAMKEEPER_DATA"] = "/nonexistent/never-used"  # --url: the server's store counts
    return subprocess.run(
        [str(DREAMKEEPER), "--url", served.url, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_cli_reads_and_writes_through_url(served):
    agent = _agent()
    saved = await asyncio.to_thread(
        _cli, served, "--agent", agent, "save", "The deploy window is Tuesday 10:00"
    )
    assert saved.returncode == 0, saved.stderr
    entry_id = saved.stdout.strip()
    assert FileMemoryStore(served.data_dir, agent).require(entry_id)
    found = await asyncio.to_thread(_cli, served, "--agent", agent, "search", "deploy window")
    assert found.returncode == 0 and entry_id in found.stdout
    shown = await asyncio.to_thread(_cli, served, "--agent", agent, "show", entry_id)
    assert "Tuesday 10:00" in shown.stdout
    bad = await asyncio.to_thread(_cli, served, "--agent", agent, "save", "x", "--importance", "9")
    assert bad.returncode == 2 and "importance" in bad.stderr
    missing = await asyncio.to_thread(_cli, served, "--agent", _agent(), "search", "x")
    assert missing.returncode == 2 and "unknown agent" in missing.stderr


def _value(text: str, sample: str) -> float:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _store_size(text: str, agent: str) -> float:
    pattern = re.compile(
        rf'^dreamkeeper_store_entries\{{agent="{agent}",state="live"\}} (\S+)$', re.M
    )
    found = pattern.search(text)
    return float(found.group(1)) if found else 0.0


async def test_metrics_move_with_traffic(served):
    agent = _agent()
    async with httpx.AsyncClient(base_url=served.url, headers=served.headers, timeout=60) as http:
        before = (await http.get("/metrics")).text
        for n in range(3):
            answer = await http.post(
                f"/v1/agents/{agent}/memories", json={"content": f"fact {n} {uuid.uuid4().hex}"}
            )
            assert answer.status_code == 201
        await http.post(f"/v1/agents/{agent}/memories", json={"content": ""})
        for _ in range(4):
            await http.post(f"/v1/agents/{agent}/search", json={"query": "fact"})
        await http.post(f"/v1/agents/{agent}/context", json={"session": "s", "message": "hi"})
        after = (await http.get("/metrics")).text
    assert after.startswith("# HELP")
    saved = 'dreamkeeper_saves_total{outcome="saved"}'
    invalid = 'dreamkeeper_saves_total{outcome="invalid"}'
    assert _value(after, saved) - _value(before, saved) == 3
    assert _value(after, invalid) - _value(before, invalid) == 1
    searches = "dreamkeeper_search_seconds_count"
    assert _value(after, searches) - _value(before, searches) == 4
    contexts = "dreamkeeper_context_seconds_count"
    assert _value(after, contexts) - _value(before, contexts) == 1
    assert _store_size(before, agent) == 0 and _store_size(after, agent) == 3


def test_temporal_runtime_metrics_are_appended_to_the_scrape(temporal_env, tmp_path):
    from tests.service.conftest import free_port, start_serve, stop_serve

    address = f"127.0.0.1:{free_port()}"
    served = start_serve(temporal_env, tmp_path, DREAMKEEPER_TEMPORAL_METRICS_ADDRESS=address)
    try:
        with served.client() as client:
            saved = client.post("/v1/agents/t1/memories", json={"content": "runtime metrics"})
            assert saved.status_code == 201
            text = client.get("/metrics").text
        own = httpx.get(f"http://{address}/metrics").text  # the SDK's own listener
    finally:
        stop_serve(served)
    assert 'dreamkeeper_saves_total{outcome="saved"} 1.0' in text
    # Names the runtime exports from the worker's first poll on (more come with traffic).
    for name in ("temporal_worker_start", "temporal_num_pollers", "temporal_request"):
        assert f"\n{name}{{" in own, own[:300]
        assert f"\n{name}{{" in text


async def test_the_worker_counts_saves_from_any_client_and_dreams_the_sweep_started(
    temporal_env, tmp_path
):
    """Outcomes are counted by serve's worker, not its routes: a save an agent made with
    its own MemoryClient and a dream the schedule's sweep started both show up."""
    from dreamkeeper.agent.client import MemoryClient
    from dreamkeeper.core.names import save_workflow_id
    from dreamkeeper.core.payloads import SaveResult, SweepInput
    from dreamkeeper.core.settings import StoreSettings
    from dreamkeeper.workflows.sweep import DreamSweep
    from tests.service.conftest import start_serve, stop_serve

    served = start_serve(temporal_env, tmp_path)
    try:
        async with httpx.AsyncClient(base_url=served.url, headers=served.headers) as http:
            before = (await http.get("/metrics")).text
            agent = _agent()
            memory = MemoryClient(
                temporal_env.client, StoreSettings(data_dir=served.data_dir), served.queue
            )
            ack = await memory.save_memory(agent, "The staging database is on port 5433")
            saved = await temporal_env.client.get_workflow_handle(
                save_workflow_id(agent, ack.entry_id), result_type=SaveResult
            ).result()
            # A turn in the conversation log gives the agent's cycle work (the sweep
            # skips an idle agent).
            ConversationLog(FileMemoryStore(served.data_dir, agent).documents).append(
                "s1", "user", "Please answer in French.", datetime.now(UTC)
            )
            # What the schedule runs, on the schedule's task queue: a dream per agent.
            swept = await temporal_env.client.execute_workflow(
                DreamSweep.run,
                SweepInput(),
                id=f"dream-sweep-{served.queue}",
                task_queue=served.queue,
            )
            assert swept.started == [agent]
            after = (await http.get("/metrics")).text
    finally:
        stop_serve(served)
    outcome = f'dreamkeeper_save_results_total{{outcome="{saved.outcome}"}}'
    assert _value(after, outcome) - _value(before, outcome) == 1
    serve_saves = 'dreamkeeper_saves_total{outcome="saved"}'
    assert _value(after, serve_saves) == _value(before, serve_saves)  # not through serve
    completed = 'dreamkeeper_dream_cycles_total{outcome="completed"}'
    assert _value(after, completed) - _value(before, completed) == 1
