"""The tour `dreamkeeper dev --demo` gives: every step a workflow you can open in the UI."""

from __future__ import annotations

from temporalio.client import Client

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.stores.search import format_hit
from dreamkeeper.worker.settings import StoreSettings
from dreamkeeper.workflows.save import save_workflow_id

AGENT = "demo"
FACTS = [
    ("User lives in Chicago (America/Chicago, UTC-6).", "user-preferences/timezone", 0.9),
    ("User prefers short answers with code first.", "user-preferences/style", 0.7),
    ("The Blazor online class runs on Fridays at 12:30.", "project-context/blazor-class", 0.6),
]


async def tour(client: Client, store: StoreSettings, task_queue: str, *, ui: str) -> None:
    memory = MemoryClient(client, store, task_queue)
    print("\n== Demo for agent 'demo' (every step below is a workflow in the UI)")
    acks = []
    for content, category, importance in FACTS:
        ack = await memory.save_memory(AGENT, content, category=category, importance=importance,
                                       source="user")  # fmt: skip
        acks.append(ack)
        print(
            f"saved [{ack.entry_id}] {category}  (workflow {save_workflow_id(AGENT, ack.entry_id)})"
        )
    now = memory.store(AGENT).now()
    print("search 'chicago timezone':")
    for hit in memory.search_memory(AGENT, "chicago timezone"):
        print("  " + format_hit(hit.entry, now))
    gone = acks[-1].entry_id
    await memory.delete_memory(AGENT, gone)
    print(f"archived [{gone}]: hidden from search, kept on disk (workflow archive-{AGENT}-{gone})")
    await memory.restore_memory(AGENT, gone)
    print(f"restored [{gone}] (workflow restore-{AGENT}-{gone})")
    result = await memory.run_dream(AGENT)
    print(f"dream cycle: purged {len(result.purge.purged)}, decayed {result.decay.decayed} "
          f"of {result.decay.considered} (workflow dream-{AGENT})")  # fmt: skip
    print(f"\nOpen {ui}/namespaces/default/workflows to read each run's history.")
    print("The worker keeps running (and the dream schedule is set); Ctrl-C stops everything.")
