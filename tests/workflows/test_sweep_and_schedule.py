from __future__ import annotations

import uuid

import pytest
from temporalio.client import WorkflowExecutionStatus

from dreamkeeper.core.dream_payloads import DreamInput
from dreamkeeper.core.names import dream_workflow_id
from dreamkeeper.core.payloads import SweepInput
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.worker.schedules import ensure_dream_schedule
from dreamkeeper.workflows.dream import Dream
from dreamkeeper.workflows.sweep import DreamSweep


def _with_work(settings, agent: str, text: str) -> None:
    """An agent with something for a cycle to do: a conversation turn to read."""
    store = open_backend(settings).memory(agent)
    store.create(text)
    ConversationLog(store.documents).append("s1", "user", text, store.now())


@pytest.mark.parametrize("backend", ["file", "postgres"])
async def test_a_sweep_starts_cycles_only_for_agents_with_work(worker, backend):
    client, queue, settings = worker
    tag = uuid.uuid4().hex[:6]
    busy, idle = f"sweep-{tag}-busy", [f"sweep-{tag}-idle{i}" for i in range(3)]
    _with_work(settings, busy, "The user prefers tea")
    for agent in idle:
        open_backend(settings).memory(agent).create("something to remember")
    handle = await client.start_workflow(
        DreamSweep.run, SweepInput(), id=f"sweep-{tag}", task_queue=queue
    )
    result = await handle.result()
    assert result.started == [busy] and result.idle == idle and result.failed == []
    children, activities = [], []
    async for event in handle.fetch_history_events():
        if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
            attrs = event.start_child_workflow_execution_initiated_event_attributes
            children.append(attrs.workflow_id)
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            activities.append(attrs.activity_type.name)
    assert children == [dream_workflow_id(busy)]
    assert activities == ["list_agents", "dream_work"]  # one check for the four agents
    # The cycle read the turn: the next sweep finds every agent idle.
    again = await client.execute_workflow(
        DreamSweep.run, SweepInput(), id=f"sweep-{tag}-again", task_queue=queue
    )
    assert again.started == [] and again.idle == sorted([busy, *idle])


async def test_sweep_dreams_for_every_agent_and_skips_one_already_dreaming(worker):
    client, queue, settings = worker
    tag = uuid.uuid4().hex[:6]
    agents = [f"sweep-{tag}-{i}" for i in range(3)]
    for agent in agents:
        _with_work(settings, agent, "something to remember")
    (settings.data_dir / "agents" / "not valid!").mkdir()
    # A dream for agent 0 that cannot finish: started on a queue no worker polls.
    blocker = await client.start_workflow(
        Dream.run,
        DreamInput(agent_id=agents[0]),
        id=dream_workflow_id(agents[0]),
        task_queue=f"nobody-{tag}",
    )
    try:
        result = await client.execute_workflow(
            DreamSweep.run, SweepInput(), id=f"sweep-{tag}", task_queue=queue
        )
        assert result.started == agents[1:]
        assert result.already_running == [agents[0]] and result.failed == []
        for agent in agents[1:]:
            desc = await client.get_workflow_handle(dream_workflow_id(agent)).describe()
            assert desc.status == WorkflowExecutionStatus.COMPLETED
    finally:
        await blocker.terminate("test over")


async def test_creating_the_schedule_twice_is_a_no_op_and_keeps_a_pause(temporal_env):
    client = temporal_env.client
    schedule_id = f"dream-schedule-{uuid.uuid4().hex[:6]}"
    assert await ensure_dream_schedule(client, "q1", "0 */12 * * *", schedule_id) == "created"
    handle = client.get_schedule_handle(schedule_id)
    await handle.pause(note="operator: investigating")
    assert await ensure_dream_schedule(client, "q1", "0 */6 * * *", schedule_id) == "updated"
    desc = await handle.describe()
    assert desc.schedule.state.paused is True
    assert desc.schedule.state.note == "operator: investigating"
    # The server stores cron as calendars: hours every 6, not every 12.
    assert [r.step for r in desc.schedule.spec.calendars[0].hour] == [6]
    schedules = [s.id async for s in await client.list_schedules() if s.id == schedule_id]
    assert schedules == [schedule_id]
    await handle.delete()


async def test_a_paced_sweep_never_runs_more_dreams_at_once_than_its_parallelism(worker):
    client, queue, settings = worker
    tag = uuid.uuid4().hex[:6]
    agents = [f"paced-{tag}-{i}" for i in range(5)]
    for agent in agents:
        _with_work(settings, agent, "something to remember")
    result = await client.execute_workflow(
        DreamSweep.run, SweepInput(parallelism=2), id=f"sweep-{tag}", task_queue=queue
    )
    assert result.started == agents and result.failed == []
    spans = []
    for agent in agents:
        desc = await client.get_workflow_handle(dream_workflow_id(agent)).describe()
        assert desc.status == WorkflowExecutionStatus.COMPLETED
        spans.append((desc.start_time, desc.close_time))
    # A dream starts only once an earlier one has closed: at any start, at most one
    # other dream is still open (the server's own timestamps, not a timing guess).
    for start, _ in spans:
        open_then = [s for s in spans if s[0] <= start and (s[1] is None or s[1] > start)]
        assert len(open_then) <= 2


async def test_a_dream_and_a_sweep_started_without_search_attributes_tag_themselves(worker):
    """`temporal workflow start --type Dream` (docs/operations.md) passes no search
    attributes: the run adds them, so the documented AgentId query finds it."""
    from dreamkeeper.client.attributes import AGENT_ID, MEMORY_OP

    client, queue, settings = worker
    agent = f"bare-{uuid.uuid4().hex[:6]}"
    _with_work(settings, agent, "The build uses make")
    dream = await client.start_workflow(
        Dream.run, DreamInput(agent_id=agent), id=f"dream-{agent}", task_queue=queue
    )
    await dream.result()
    attributes = (await dream.describe()).typed_search_attributes
    assert attributes.get(AGENT_ID) == agent and attributes.get(MEMORY_OP) == "dream"
    found = [
        e.id async for e in client.list_workflows(f"AgentId = '{agent}' AND MemoryOp = 'dream'")
    ]
    assert found == [f"dream-{agent}"]  # before: nothing (the children were tagged)

    _with_work(settings, agent, "The build also uses ninja")  # the dream read the first
    sweep = await client.start_workflow(
        DreamSweep.run, SweepInput(), id=f"sweep-{queue}", task_queue=queue
    )
    assert (await sweep.result()).started == [agent]
    assert (await sweep.describe()).typed_search_attributes.get(MEMORY_OP) == "sweep"


async def test_the_schedule_starts_sweeps_under_the_ids_the_docs_give(worker):
    """docs/operations.md: schedule `dreamkeeper-dream-sweep-{queue}` on a queue other than
    the default, and sweeps `dream-sweep-{queue}-{time}` (the schedule appends the time)."""
    import asyncio
    from datetime import datetime

    from dreamkeeper.worker.schedules import schedule_id_for

    client, queue, _ = worker
    assert schedule_id_for(queue) == f"dreamkeeper-dream-sweep-{queue}"
    assert schedule_id_for("dreamkeeper") == "dreamkeeper-dream-sweep"
    await ensure_dream_schedule(client, queue, "0 0 1 1 *")
    handle = client.get_schedule_handle(schedule_id_for(queue))
    try:
        await handle.trigger()
        while not (await handle.describe()).info.recent_actions:  # no time is asserted
            await asyncio.sleep(0.2)
        started = (await handle.describe()).info.recent_actions[0].action
        prefix = f"dream-sweep-{queue}-"
        assert started.workflow_id.startswith(prefix), started.workflow_id
        datetime.fromisoformat(started.workflow_id.removeprefix(prefix))
        run = client.get_workflow_handle(started.workflow_id, run_id=started.first_execution_run_id)
        assert (await run.describe()).workflow_type == "DreamSweep"
    finally:
        await handle.delete()
