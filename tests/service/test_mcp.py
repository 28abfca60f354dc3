"""MCP clients from the official `mcp` SDK: over stdio (`dreamkeeper mcp --agent A`, the
process a desktop assistant starts) and over streamable HTTP (/mcp inside serve). Each
lists the 7 tools, saves a memory and finds it."""

from __future__ import annotations

import os
import uuid

import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from dreamkeeper.agent.tools import tool_specs
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from tests.service.conftest import DREAMKEEPER, serve_env

SPECS = {s["function"]["name"]: s["function"] for s in tool_specs()}


def _text(result) -> str:
    return "\n".join(block.text for block in result.content)


async def _exercise(session: ClientSession, fact: str, query: str) -> str:
    await session.initialize()
    listed = await session.list_tools()
    assert {t.name for t in listed.tools} == set(SPECS)
    for tool in listed.tools:
        assert tool.description == SPECS[tool.name]["description"]
        assert tool.input_schema == SPECS[tool.name]["parameters"]
    saved = await session.call_tool("save_memory", {"content": fact, "source": "user"})
    assert not saved.is_error, _text(saved)
    text = _text(saved)
    assert text.startswith("Saved to long-term memory as [")
    entry_id = text.split("[", 1)[1].split("]", 1)[0]
    found = await session.call_tool("search_memory", {"query": query})
    assert entry_id in _text(found)
    bad = await session.call_tool("update_memory_importance", {"id": entry_id, "importance": 5})
    assert bad.is_error and "nothing was done" in _text(bad)
    return entry_id


async def test_stdio_server_lists_saves_and_finds(worker, temporal_env, tmp_path):
    _, queue, settings = worker
    agent = f"m-{uuid.uuid4().hex[:6]}"
    env = serve_env(temporal_env, settings.data_dir, queue, DREAMKEEPER_AGENT=agent)
    env["PATH"] = os.environ.get("PATH", "")
    params = StdioServerParameters(
        command=str(DREAMKEEPER), args=["mcp", "--session", "desk"], env=env
    )
    with open(tmp_path / "mcp.stderr", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                entry_id = await _exercise(session, "User's cat is named Miso", "cat name")
    assert FileMemoryStore(settings.data_dir, agent).require(entry_id).content == (
        "User's cat is named Miso"
    )


async def test_stdio_server_against_a_remote_serve(served, tmp_path):
    agent = f"m-{uuid.uuid4().hex[:6]}"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DREAMKEEPER_URL": served.url,
        "DREAMKEEPER_SERVE_TOKEN": served.token or "",
        "DREAMKEEPER_AGENT": agent,
        "DREAMKEEPER_EMBEDDING_BACKEND": "none",
        "DREAMKEEPER_DATA": str(tmp_path / "not-used"),
    }
    params = StdioServerParameters(command=str(DREAMKEEPER), args=["mcp"], env=env)
    with open(tmp_path / "mcp.stderr", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                entry_id = await _exercise(session, "The office plant is a fern", "office plant")
    assert FileMemoryStore(served.data_dir, agent).require(entry_id)
    assert not (tmp_path / "not-used").exists()


async def test_streamable_http_inside_serve(served):
    agent = f"m-{uuid.uuid4().hex[:6]}"
    headers = {**served.headers, "X-Dreamkeeper-Agent": agent, "X-Dreamkeeper-Session": "ide"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with streamable_http_client(f"{served.url}/mcp", http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                entry_id = await _exercise(session, "User drinks oat milk", "milk")
    assert FileMemoryStore(served.data_dir, agent).require(entry_id)


async def test_streamable_http_without_an_agent_says_so(served):
    async with httpx2.AsyncClient(headers=served.headers, timeout=60) as http:
        async with streamable_http_client(f"{served.url}/mcp", http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                result = await session.call_tool("search_memory", {"query": "x"})
    assert result.is_error
    assert "X-Dreamkeeper-Agent" in _text(result) or "x-dreamkeeper-agent" in _text(result)
