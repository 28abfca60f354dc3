"""The agent side end to end: memory tools writing through workflows, and the example
agent loop driven by a scripted OpenAI-compatible model that calls tools."""

from __future__ import annotations

import importlib.util
import json
import uuid
from pathlib import Path

from dreamkeeper.agent.session import SessionContext
from dreamkeeper.agent.tools import MemoryTools
from dreamkeeper.core.settings import LLMSettings
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore
from dreamkeeper.testing.scripted_llm import Reply, ScriptedLLM, tool_call

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"


def _example():
    spec = importlib.util.spec_from_file_location("agent_loop_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_write_tools_go_through_workflows_and_say_what_happened(memory):
    agent = f"t-{uuid.uuid4().hex[:6]}"
    session = SessionContext.user("s1")
    tools = MemoryTools(
        agent,
        session,
        memory=memory.store(agent),
        writer=memory,
        working=FileWorkingMemoryStore(memory.settings.data_dir, agent),
    )
    saved = await tools.call(
        "save_memory",
        {
            "content": "The user's dog is named Biscuit",
            "category": "people/family",
            "source": "gossip",
        },
    )
    assert "source 'gossip' was not recognised and was dropped" in saved
    entry_id = saved.split("[", 1)[1].split("]", 1)[0]
    entry = memory.store(agent).require(entry_id)
    assert entry.content == "The user's dog is named Biscuit" and entry.source is None

    scored = await tools.call("update_memory_importance", {"id": entry_id, "importance": 0.9})
    assert scored == f"Importance of [{entry_id}] is now 0.90."

    deleted = await tools.call("delete_memory", {"id": entry_id})
    assert "hidden from search" in deleted and "restored until it is purged" in deleted
    assert memory.store(agent).require(entry_id).is_archived  # archived, not deleted
    assert "Biscuit" not in await tools.call("search_memory", {"query": "dog biscuit"})

    unknown = await tools.call("delete_memory", {"id": "0123456789ab"})
    assert unknown.startswith("Error:") and "no memory with id" in unknown


async def test_the_example_loop_runs_tools_records_turns_and_recalls_next_time(memory):
    example = _example()
    llm = ScriptedLLM()  # the agent's model; the worker has no LLM (saves are kept verbatim)
    agent = f"loop-{uuid.uuid4().hex[:6]}"
    loop = example.MemoryAgent(
        memory,
        agent,
        SessionContext.user("s1"),
        LLMSettings(base_url=llm.base_url, model="scripted"),
    )
    llm.replies += [
        Reply(
            None,
            tool_calls=[
                tool_call(
                    "call_1",
                    "save_memory",
                    {
                        "content": "The user's favourite editor is Helix",
                        "category": "user-preferences/tools",
                        "source": "user",
                    },
                )
            ],
        ),
        Reply("Noted: you use Helix."),
        Reply("You use Helix."),
    ]
    try:
        answer = await loop.turn("Remember that my favourite editor is Helix, please.")
        assert answer == "Noted: you use Helix."
        first, second = llm.requests[0], llm.requests[1]
        assert {t["function"]["name"] for t in first["tools"]} >= {"save_memory", "search_memory"}
        assert first["messages"][-1] == {
            "role": "user",
            "content": "Remember that my favourite editor is Helix, please.",
        }
        tool_result = second["messages"][-1]
        assert tool_result["role"] == "tool" and tool_result["tool_call_id"] == "call_1"
        assert "Saved to long-term memory as [" in tool_result["content"]

        again = await loop.turn("Which text editor do I like to use for coding?")
        assert again == "You use Helix."
        third = llm.requests[2]["messages"]
        recalled = [
            m["content"]
            for m in third
            if m["role"] == "system" and m["content"].startswith("Recalled from long-term memory")
        ]
        assert recalled and "The user's favourite editor is Helix" in recalled[0]
        replayed = [m["content"] for m in third if m["role"] in ("user", "assistant")]
        assert replayed[:2] == [
            "Remember that my favourite editor is Helix, please.",
            "Noted: you use Helix.",
        ]
    finally:
        await loop.close()
        llm.close()
    turns = [
        json.loads(line)["content"]
        for line in (
            memory.settings.data_dir / "agents" / agent / "conversation-log" / "turns.jsonl"
        )
        .read_text()
        .splitlines()
    ]
    assert turns == [
        "Remember that my favourite editor is Helix, please.",
        "Noted: you use Helix.",
        "Which text editor do I like to use for coding?",
        "You use Helix.",
    ]
