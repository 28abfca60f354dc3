"""Capture a history of every workflow type from the code as it is now, for the replay
tests (`tests/replay/test_replay.py`).

    .venv/bin/python -m tests.replay.capture --label v1

runs one scenario against a throwaway dev server and an in-process worker — a claim, an
enriched save, a duplicate one and one replacing an older fact, one whose replacement is
refused and one that conflicts with a current fact, archive, restore,
re-score, a search on the worker, a full dream cycle (purge, consolidation with a merge,
a prune and a supersede, preferences, decay), its undo, a dry run, applying its plan and
undoing that, a consolidation waiting on approval, an idle agent's cycle, a paced sweep,
and a consolidation whose prunes are past the week's cap, and forgets (a dry run, by
phrase, a whole agent) — then writes each
workflow's history to `histories/<WorkflowType>/<label>-<n>.json`. Histories already there
are never overwritten: they are what running workflows of that version look like, and a
later change must still replay them (guard shape changes with `workflow.patched`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.client.attributes import SEARCH_ATTRIBUTES
from dreamkeeper.core.dream_payloads import ConsolidationInput, DreamInput, DreamResult
from dreamkeeper.core.dream_plan import ApplyPlanInput, ApplyPlanResult, UndoInput
from dreamkeeper.core.errors import ReplaceRefused
from dreamkeeper.core.forgetting import ForgetRequest
from dreamkeeper.core.names import save_workflow_id
from dreamkeeper.core.payloads import SweepInput
from dreamkeeper.core.settings import EmbeddingSettings, LLMSettings, StoreSettings
from dreamkeeper.policies.consolidation import EPHEMERAL_REASON
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.stores.identity import ensure_identity
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore
from dreamkeeper.testing.scripted_llm import Reply, ScriptedLLM
from dreamkeeper.worker.claim import claim_task_queue
from dreamkeeper.worker.temporal_worker import build_worker
from dreamkeeper.workflows.consolidation import Consolidation
from dreamkeeper.workflows.dream import Dream
from dreamkeeper.workflows.dream_ops import ApplyDreamPlan, UndoDream
from dreamkeeper.workflows.sweep import DreamSweep

HISTORIES = Path(__file__).parent / "histories"
TEMPORAL = Path(sys.executable).parent / "temporal"
AGENT = "replay"
IDLE = "replay-idle"
T0 = datetime(2026, 9, 1, 8, 0, tzinfo=UTC)
PAIR = ("a00000000001", "a00000000002")
NOTE = "a00000000003"
STALE = "a00000000004"
VERSIONS = ("a00000000005", "a00000000006")  # an old and a newer value of one fact
HOME = "a00000000007"  # replaced by a save that says so
FACTS = [
    {"content": "Trish Roberts works at PWOP Productions.", "category": "people/colleagues"},
    {"content": "Trish Roberts' phone number is +1 386-299-4605.", "category": "people/contacts"},
]
MERGED = {
    "content": "Duane and Trish Roberts run PWOP Productions in Las Vegas.",
    "category": "people/colleagues",
    "importance": 0.7,
}
WEEKLY_AGENT = "replay-weekly"
FORGET_AGENT = "replay-forget"
WEEKLY_NOTES = [f"b000000000{n:02d}" for n in range(8)]
PREFS = {"toSave": [{"content": "The user prefers answers without emoji.", "importance": 0.7}]}


def respond(request: dict) -> Reply:
    """The scripted LLM: enrichment, consolidation and preference prompts by their text."""
    system = request["messages"][0]["content"]
    if "raw note" in system:  # enrichment: the phone-number note splits, others stay whole
        split = "gave her number" in request["messages"][1]["content"]
        return Reply(json.dumps(FACTS if split else []))
    if "long-term memory" in system and "toDelete" in system:
        prompt = request["messages"][1]["content"]
        if "Weekly status ping" in prompt:  # the weekly-cap agent: prune every note
            return Reply(json.dumps({"toDelete": list(WEEKLY_NOTES), "toSave": []}))
        if PAIR[0] in prompt and PAIR[1] in prompt:
            merge = {**MERGED, "sourceIds": list(PAIR)}
            outdated = (
                [{"id": VERSIONS[0], "by": VERSIONS[1]}]
                if all(v in prompt for v in VERSIONS)
                else []
            )
            return Reply(
                json.dumps({"toDelete": [NOTE], "toSave": [merge], "superseded": outdated})
            )
        return Reply(json.dumps({"toDelete": [], "toSave": []}))
    return Reply(json.dumps(PREFS))


def seed(settings: StoreSettings) -> None:
    store = FileMemoryStore(settings.data_dir, AGENT, clock=lambda: T0)
    store.create(
        "Duane Roberts runs PWOP Productions in Las Vegas.",
        category="people/colleagues",
        entry_id=PAIR[0],
    )
    store.create(
        "Trish Roberts runs PWOP Productions with Duane in Las Vegas.",
        category="people/colleagues",
        entry_id=PAIR[1],
    )
    store.create("ping received from the monitor", category="status", entry_id=NOTE, importance=0.1)
    store.create("An old note about a meeting room.", category="notes", entry_id=STALE)
    store.create("Maya Lund lives in Lisbon.", category="people/friends", entry_id=VERSIONS[0])
    store.create(
        "Maya Lund lives in Porto.",
        category="people/friends",
        entry_id=VERSIONS[1],
        now=T0 + timedelta(days=30),
    )
    store.create("Trish Roberts lives in Henderson.", category="people", entry_id=HOME)
    store.archive(STALE, "deleted by agent tool")
    log = ConversationLog(store.documents)
    log.append("s1", "user", "Stop using emoji. I told you twice.", T0)
    log.append("s1", "assistant", "Understood.", T0 + timedelta(seconds=5))


async def scenario(client: Client, settings: StoreSettings, queue: str) -> None:
    await claim_task_queue(client, queue, ensure_identity(settings.data_dir))
    seed(settings)
    memory = MemoryClient(client, settings, queue)
    note = "Trish Roberts of PWOP Productions gave her number, +1 386-299-4605."
    first = await memory.save_memory(AGENT, note, category="people", source="user")
    await client.get_workflow_handle(save_workflow_id(AGENT, first.entry_id)).result()
    again = await memory.save_memory(AGENT, "Trish Roberts works at PWOP Productions.")
    await client.get_workflow_handle(save_workflow_id(AGENT, again.entry_id)).result()
    moved = await memory.save_memory(
        AGENT, "Trish Roberts lives in Reno.", category="people", replaces=[HOME]
    )
    await client.get_workflow_handle(save_workflow_id(AGENT, moved.entry_id)).result()
    # A replaces about another subject: answered as refused, the run completes.
    refused = "a00000000008"
    with contextlib.suppress(ReplaceRefused):
        await memory.save_memory(
            AGENT, "Trish Roberts is allergic to cats.", replaces=[PAIR[0]], entry_id=refused
        )
    await client.get_workflow_handle(save_workflow_id(AGENT, refused)).result()
    # A change nobody explained: a conflict the dream's settlement step finds.
    later = await memory.save_memory(AGENT, "Trish Roberts moved to Sparks.", category="people")
    await client.get_workflow_handle(save_workflow_id(AGENT, later.entry_id)).result()
    await memory.delete_memory(AGENT, PAIR[0])
    await memory.restore_memory(AGENT, PAIR[0])
    await memory.update_memory_importance(AGENT, PAIR[0], 0.8)
    await memory.search_on_worker(AGENT, "Trish Roberts PWOP")
    dream = await client.execute_workflow(
        Dream.run,
        DreamInput(agent_id=AGENT, as_of=T0 + timedelta(days=200)),
        id=f"dream-{AGENT}",
        task_queue=queue,
        result_type=DreamResult,
    )
    await reversible(client, queue, dream)
    # A new entry: the first cycle reviews it, then the agent has nothing to do: its
    # next cycle runs the idle check alone, and the sweep starts no cycle for it.
    FileMemoryStore(settings.data_dir, IDLE).create("The user lives in Chicago.")
    for run in ("first", "idle"):
        await client.execute_workflow(
            Dream.run, DreamInput(agent_id=IDLE), id=f"dream-{IDLE}-{run}", task_queue=queue
        )
    await client.execute_workflow(
        DreamSweep.run, SweepInput(parallelism=2), id="dream-sweep", task_queue=queue
    )
    await weekly_cap(client, settings, queue)
    await forget(memory, settings)


async def forget(memory: MemoryClient, settings: StoreSettings) -> None:
    """A dry run of a forget by phrase, the forget itself, and a whole agent's."""
    store = FileMemoryStore(settings.data_dir, FORGET_AGENT, clock=lambda: T0)
    store.create("Odalys Prent's locker code at Harbour Gym is 5519-XK.", category="people")
    store.create("The user rows on Sunday mornings.")
    match = ForgetRequest(match="Harbour Gym", derived="forget")
    await memory.forget(FORGET_AGENT, match.model_copy(update={"dry_run": True}))
    await memory.forget(FORGET_AGENT, match.model_copy(update={"request_id": "by-phrase"}))
    await memory.forget(FORGET_AGENT, ForgetRequest(whole_agent=True, request_id="everything"))


async def weekly_cap(client: Client, settings: StoreSettings, queue: str) -> None:
    """A cycle whose prunes are past the week's cap: they wait for an approval that
    never comes (the weekly-prune-cap patch)."""
    as_of = T0 + timedelta(days=300)
    store = FileMemoryStore(settings.data_dir, WEEKLY_AGENT, clock=lambda: T0)
    for n, entry_id in enumerate(WEEKLY_NOTES):
        store.create(f"Weekly status ping {n} from the monitor.", entry_id=entry_id)
    for n in range(4):  # pruned earlier this week: the cap is used up
        gone = store.create(f"An earlier ping {n}.", category="status", importance=0.1)
        store.archive(gone.id, EPHEMERAL_REASON, now=as_of - timedelta(days=1))
    await client.execute_workflow(
        Consolidation.run,
        ConsolidationInput(agent_id=WEEKLY_AGENT, as_of=as_of, approval_timeout_minutes=0.01),
        id=f"consolidation-{WEEKLY_AGENT}",
        task_queue=queue,
    )


async def capture(label: str) -> dict[str, int]:
    llm = ScriptedLLM(responder=respond)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL),
        data_converter=pydantic_data_converter,
        dev_server_extra_args=["--headless"],
        search_attributes=SEARCH_ATTRIBUTES,
    )
    written: dict[str, int] = defaultdict(int)
    try:
        with TemporaryDirectory(prefix="dk-replay-") as data:
            settings = StoreSettings(data_dir=Path(data))
            queue = f"replay-{uuid.uuid4().hex[:8]}"
            llm_settings = LLMSettings(base_url=llm.base_url, model="scripted", timeout_seconds=30)
            with ThreadPoolExecutor(max_workers=4) as executor:
                worker = build_worker(
                    env.client,
                    settings,
                    task_queue=queue,
                    executor=executor,
                    llm=llm_settings,
                    embeddings=EmbeddingSettings(),
                )
                async with worker:
                    await scenario(env.client, settings, queue)
            async for execution in env.client.list_workflows(f"TaskQueue = '{queue}'"):
                handle = env.client.get_workflow_handle(execution.id, run_id=execution.run_id)
                history = await handle.fetch_history()
                folder = HISTORIES / execution.workflow_type
                folder.mkdir(parents=True, exist_ok=True)
                written[execution.workflow_type] += 1
                path = folder / f"{label}-{written[execution.workflow_type]}.json"
                if path.exists():
                    raise SystemExit(f"{path} exists: histories are never overwritten")
                # The workflow id is part of what replays (child ids derive from it).
                document = {"workflowId": execution.id, **json.loads(history.to_json())}
                path.write_text(json.dumps(document, indent=1))
    finally:
        await env.shutdown()
        llm.close()
    return dict(written)


async def reversible(client: Client, queue: str, dream: DreamResult) -> None:
    """Reversible dreams: undo the cycle, preview the next (dry run), apply that plan, undo it, and a
    consolidation whose risky changes wait for an approval that never comes."""
    assert dream.cycle_id is not None
    await client.execute_workflow(
        UndoDream.run,
        UndoInput(agent_id=AGENT, cycle_id=dream.cycle_id),
        id=f"undo-{AGENT}-1",
        task_queue=queue,
    )
    dry = await client.execute_workflow(
        Dream.run,
        DreamInput(agent_id=AGENT, as_of=T0 + timedelta(days=201), dry_run=True),
        id=f"dream-{AGENT}-dry",
        task_queue=queue,
        result_type=DreamResult,
    )
    assert dry.plan is not None
    applied = await client.execute_workflow(
        ApplyDreamPlan.run,
        ApplyPlanInput(plan=dry.plan),
        id=f"apply-{AGENT}",
        task_queue=queue,
        result_type=ApplyPlanResult,
    )
    await client.execute_workflow(
        UndoDream.run,
        UndoInput(agent_id=AGENT, cycle_id=applied.cycle_id),
        id=f"undo-{AGENT}-2",
        task_queue=queue,
    )
    await client.execute_workflow(
        Consolidation.run,
        ConsolidationInput(
            agent_id=AGENT,
            as_of=T0 + timedelta(days=202),
            approval="all",
            approval_timeout_minutes=0.01,
        ),
        id=f"consolidation-{AGENT}-approval",
        task_queue=queue,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="version label, e.g. v1")
    written = asyncio.run(capture(parser.parse_args().label))
    for kind, count in sorted(written.items()):
        print(f"{kind}: {count}")


if __name__ == "__main__":
    main()
