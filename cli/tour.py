"""The tour `dreamkeeper dev --demo` gives: every step a workflow you can open in the UI."""

from __future__ import annotations

from temporalio.client import Client

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.agent.context import ContextBuilder
from dreamkeeper.agent.session import SessionContext
from dreamkeeper.core.names import save_workflow_id
from dreamkeeper.core.settings import StoreSettings, embedding_settings
from dreamkeeper.stores.search.query import format_hit
from dreamkeeper.stores.vectors.embedding_client import embedding_client

AGENT = "demo"
FACTS = [
    ("User lives in Chicago (America/Chicago, UTC-6).", "user-preferences/timezone", 0.9),
    ("User prefers short answers with code first.", "user-preferences/style", 0.7),
    ("The Blazor online class runs on Fridays at 12:30.", "project-context/blazor-class", 0.6),
]


async def tour(client: Client, store: StoreSettings, task_queue: str, *, ui: str) -> None:
    memory = MemoryClient(client, store, task_queue, embedding_client(embedding_settings()))
    print("\n== Demo for agent 'demo' (every step below is a workflow in the UI)")
    acks = []
    for content, category, importance in FACTS:
        # The same key on every run: a second tour's saves are the first tour's (not new
        # copies that dedup folds away), so archive and restore below act on a live entry.
        ack = await memory.save_memory(
            AGENT,
            content,
            category=category,
            importance=importance,
            source="user",
            idempotency_key=f"demo-tour:{category}",
        )
        acks.append(ack)
        print(
            f"saved [{ack.entry_id}] {category}  (workflow {save_workflow_id(AGENT, ack.entry_id)})"
        )
    now = memory.store(AGENT).now()
    print("search 'chicago timezone':")
    for hit in memory.search_memory(AGENT, "chicago timezone"):
        print("  " + format_hit(hit.entry, now))
    session = SessionContext.user("demo-session")
    working = memory.working_memory(AGENT)
    working.save(session.namespace, "draft_reply", "Hi Trish, Friday works for me.", tags=["email"])
    builder = ContextBuilder(memory.store(AGENT), working, memory.conversations(AGENT))
    question = "What time is it for me right now, in my own timezone?"
    print(f"memory context an agent's LLM gets with {question!r}:")
    for message in builder.build(session, question).messages:
        print("  [" + message["role"] + "] " + message["content"].replace("\n", "\n    "))
    gone = acks[-1].entry_id
    await memory.delete_memory(AGENT, gone)
    print(f"archived [{gone}]: hidden from search, kept on disk (workflow archive-{AGENT}-{gone})")
    await memory.restore_memory(AGENT, gone)
    print(f"restored [{gone}] (workflow restore-{AGENT}-{gone})")
    result = await memory.run_dream(AGENT)
    # A pass with nothing to do is skipped (the cycle's idle check): say so.
    skipped = f"; nothing to do for {', '.join(result.idle)} (skipped)" if result.idle else ""
    print(
        f"dream cycle: purged {len(result.purge.purged)}; {result.consolidation.summary()}; "
        f"decayed {result.decay.decayed} of {result.decay.considered}{skipped} "
        f"(workflow dream-{AGENT})"
    )
    print(f"\nOpen {ui}/namespaces/default/workflows to read each run's history.")
    print("The worker keeps running (and the dream schedule is set); Ctrl-C stops everything.")
