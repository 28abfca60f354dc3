"""`dreamkeeper dream` with --url goes to that serve (its routes: run a cycle, pending,
approve, reject); the local data directory is not used (it does not even exist)."""

from __future__ import annotations

import asyncio
import uuid

from dreamkeeper.stores.files.memory_store import FileMemoryStore
from tests.service.test_remote_and_metrics import _cli


async def test_dream_and_its_approval_actions_go_through_the_serve(served):
    agent = f"r-{uuid.uuid4().hex[:8]}"
    saved = await asyncio.to_thread(_cli, served, "--agent", agent, "save", "the build uses make")
    assert saved.returncode == 0, saved.stderr

    ran = await asyncio.to_thread(_cli, served, "dream", "--agent", agent)
    assert ran.returncode == 0, ran.stderr
    assert f" for agent {agent}: " in ran.stdout
    assert f"running through {served.url}; this waits for it to finish" in ran.stderr
    no_wait = await asyncio.to_thread(_cli, served, "dream", "--agent", agent, "--no-wait")
    assert no_wait.returncode == 2 and "--no-wait cannot go through a serve" in no_wait.stderr
    assert FileMemoryStore(served.data_dir, agent).entries()  # the server's store, not ours

    # The server answers for the finished cycle: nothing waits.
    pending = await asyncio.to_thread(_cli, served, "dream", "pending", "--agent", agent)
    assert pending.returncode == 0 and pending.stdout.strip() == "pending 0", pending.stderr
    # An agent the server has never seen: its refusal, not a local one.
    other = f"r-{uuid.uuid4().hex[:8]}"
    unknown = await asyncio.to_thread(_cli, served, "dream", "reject", "--agent", other)
    assert unknown.returncode == 2 and "unknown agent" in unknown.stderr, unknown.stderr
    assert "/nonexistent" not in unknown.stderr
