"""Dreamkeeper in 30 seconds: save, search, build a turn's context, list the tools.

Run it from the repository while `bash scripts/run.sh` (or `dreamkeeper dev`) is up.
"""

import asyncio

from dreamkeeper import MemoryClient, SessionContext


async def main() -> None:
    async with MemoryClient.connect() as memory:  # DREAMKEEPER_DATA, TEMPORAL_ADDRESS, ...
        me = memory.agent("a1")
        ack = await me.save("The user lives in Chicago and likes short answers.", source="user")
        print("saved", ack.entry_id)  # durable and searchable; enrichment runs on in a workflow
        for hit in me.search("where does the user live"):
            print("found", hit.entry.id, hit.entry.content)
        session = SessionContext.user("s1")
        for message in me.context.build(session, "What should I wear in Chicago today?").messages:
            print(message["role"], "|", message["content"].splitlines()[0])
        print("tools:", ", ".join(spec["function"]["name"] for spec in me.tools(session).specs()))


asyncio.run(main())
