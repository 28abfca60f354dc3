"""`dreamkeeper dream` through a real worker: a dry run's diff and JSON plan,
applying that plan, undoing the run it made; deciding a waiting cycle's risky changes;
a cycle in the foreground saying what it waits for, and `--no-wait`."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import uuid
from datetime import timedelta

import pytest
from temporalio.service import RPCError, RPCStatusCode

from dreamkeeper.agent import dream_ops
from dreamkeeper.core.dream_payloads import ConsolidationInput, ConsolidationResult
from dreamkeeper.stores.dream_state.dream_settings import write_approval
from dreamkeeper.stores.files.identity import ensure_identity
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.workflows.consolidation import Consolidation
from tests.workflows import test_dream_approval as approval
from tests.workflows.test_cli_through_worker import DREAMKEEPER, _cli, _env
from tests.workflows.test_reversible_dreams import A, B, C, _honest_reply, _seed

pytestmark = pytest.mark.slow  # a CLI process per call


async def test_dry_run_diff_then_apply_the_json_plan_then_undo_it(worker, temporal_env, llm):
    _, queue, settings = worker
    ensure_identity(settings.data_dir)
    _seed(settings, "cli")
    env = _env(temporal_env, queue, settings.data_dir)
    before = {e.id: e.content for e in FileMemoryStore(settings.data_dir, "cli").entries()}
    llm.replies += [_honest_reply(), _honest_reply()]

    diff = await _cli(env, "dream", "--agent", "cli", "--dry-run")
    assert diff.returncode == 0, diff.stderr
    assert f"  - {A} r1: Trish Roberts lives in Atlanta, Georgia." in diff.stdout
    assert "  + Trish Roberts lives in Atlanta, Georgia, and has lived there" in diff.stdout
    assert f"  - {C} r1: checking the build status" in diff.stdout
    assert "nothing was applied" in diff.stdout

    planned = await _cli(env, "dream", "--agent", "cli", "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert [m["sources"] for m in plan["merges"]] == [[A, B]]
    path = settings.data_dir / "plan.json"
    path.write_text(planned.stdout)

    applied = await _cli(env, "dream", "--agent", "cli", "--apply", str(path))
    assert applied.returncode == 0, applied.stderr
    assert "1 merge(s), 1 prune(s)" in applied.stdout
    run_id = applied.stdout.rsplit("dreamkeeper dream undo ", 1)[1].strip()
    live = {e.id for e in FileMemoryStore(settings.data_dir, "cli").entries()}
    assert A not in live and B not in live and C not in live

    undone = await _cli(env, "dream", "--agent", "cli", "undo", run_id)
    assert undone.returncode == 0, undone.stderr
    assert f"undo of {run_id}: restored" in undone.stdout
    after = {e.id: e.content for e in FileMemoryStore(settings.data_dir, "cli").entries()}
    assert {i: t for i, t in after.items() if i in before} == before
    assert set(after) == set(before)

    bad = await _cli(env, "dream", "--agent", "cli", "--apply", str(settings.data_dir / "nope"))
    assert bad.returncode == 2 and "cannot read" in bad.stderr


async def test_dream_pending_approve_and_reject_decide_a_waiting_cycle(worker, temporal_env, llm):
    """The three approval actions, each a CLI process against a cycle that waits on them;
    the global --agent after the subcommand, --run naming the workflow."""
    client, queue, settings = worker
    ensure_identity(settings.data_dir)
    agent = f"ap-{uuid.uuid4().hex[:6]}"
    approval._seed(settings, agent)
    llm.replies.append(approval._reply())
    handle = await client.start_workflow(
        Consolidation.run,
        ConsolidationInput(
            agent_id=agent, as_of=approval.T0 + timedelta(days=1), approval="risky", risky_prunes=0
        ),
        id=dream_ops.consolidation_workflow_id(agent),
        task_queue=queue,
        result_type=ConsolidationResult,
    )
    waiting = await approval._pending(handle)
    merge_key = next(p.key for p in waiting.pending if p.key.startswith("merge:"))
    prune_key = f"prune:{approval.CH}"
    env = _env(temporal_env, queue, settings.data_dir)

    shown = await _cli(env, "dream", "pending", "--agent", agent)
    assert shown.returncode == 0, shown.stderr
    assert f"  ? {merge_key}: merge of [{approval.HV1}, {approval.HV2}]" in shown.stdout
    as_json = await _cli(env, "dream", "pending", "--json", "--run", handle.id, "--agent", agent)
    assert as_json.returncode == 0, as_json.stderr
    assert {p["key"] for p in json.loads(as_json.stdout)["pending"]} == {merge_key, prune_key}

    rejected = await _cli(env, "dream", "reject", merge_key, "--agent", agent)
    assert rejected.returncode == 0, rejected.stderr
    assert f"  rejected {merge_key}" in rejected.stdout
    approved = await _cli(env, "--agent", agent, "dream", "approve")  # no key: all the rest
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.startswith("pending 0") and f"  approved {prune_key}" in approved.stdout

    result = await handle.result()
    assert [m.sources for m in result.merged] == [[approval.P1, approval.P2]]
    assert result.pruned == [approval.CH]


async def test_a_cli_error_with_verbose_is_raised_with_its_traceback(worker, temporal_env):
    _, queue, settings = worker
    ensure_identity(settings.data_dir)
    FileMemoryStore(settings.data_dir, "cli").create("a fact")
    env = _env(temporal_env, queue, settings.data_dir)
    # Approving a run that does not exist fails (nothing to approve); asking what it has
    # pending answers "nothing pending".
    quiet = await _cli(env, "dream", "approve", "--run", "no-such-workflow")
    loud = await _cli(env, "-v", "dream", "approve", "--run", "no-such-workflow")
    assert quiet.returncode == loud.returncode == 1
    assert "Traceback" not in quiet.stderr and quiet.stderr.startswith("error: ")
    # Python's own report: the traceback, then the exception's qualified type and message.
    assert "Traceback (most recent call last)" in loud.stderr and "error: " not in loud.stderr
    assert quiet.stderr.strip().removeprefix("error: ") in loud.stderr.strip().splitlines()[-1]


async def _waiting_consolidation(client, queue, settings, agent):
    approval._seed(settings, agent)
    return await client.start_workflow(
        Consolidation.run,
        ConsolidationInput(
            agent_id=agent, as_of=approval.T0 + timedelta(days=1), approval="risky", risky_prunes=0
        ),
        id=dream_ops.consolidation_workflow_id(agent),
        task_queue=queue,
        result_type=ConsolidationResult,
    )


async def test_approving_a_key_that_is_not_pending_exits_2_and_lists_the_pending_keys(
    worker, temporal_env, llm
):
    client, queue, settings = worker
    ensure_identity(settings.data_dir)
    agent = f"ap-{uuid.uuid4().hex[:6]}"
    llm.replies.append(approval._reply())
    handle = await _waiting_consolidation(client, queue, settings, agent)
    waiting = {p.key for p in (await approval._pending(handle)).pending}
    env = _env(temporal_env, queue, settings.data_dir)

    for action in ("approve", "reject"):
        typo = await _cli(env, "--agent", agent, "dream", action, "merge:0123456789ab")
        assert typo.returncode == 2, typo.stderr
        assert "Traceback" not in typo.stderr and "WorkflowUpdateFailedError" not in typo.stderr
        assert "merge:0123456789ab: not pending" in typo.stderr
        assert all(key in typo.stderr for key in waiting), typo.stderr
    # Nothing was decided: every key still waits, and the cycle ends on the real decision.
    assert {p.key for p in (await approval._pending(handle)).pending} == waiting
    assert (await _cli(env, "--agent", agent, "dream", "reject")).returncode == 0
    result = await handle.result()  # only what was never risky applied
    assert [m.sources for m in result.merged] == [[approval.P1, approval.P2]]
    assert result.pruned == []


def _read_until(stream, wanted: str, seen: list[str]) -> str:
    """Lines of a running `dreamkeeper dream` until one containing `wanted` (no clock:
    the process's own output decides)."""
    for line in stream:
        seen.append(line)
        if wanted in line:
            return line
    raise AssertionError(f"{wanted!r} never came:\n{''.join(seen)}")


async def test_a_dream_waiting_for_approval_says_so_with_the_command_and_a_heartbeat(
    worker, temporal_env, llm
):
    _, queue, settings = worker
    ensure_identity(settings.data_dir)
    agent = f"ap-{uuid.uuid4().hex[:6]}"
    approval._seed(settings, agent)
    write_approval(FileMemoryStore(settings.data_dir, agent).documents, "risky")
    llm.replies.append(approval._reply())
    env = _env(temporal_env, queue, settings.data_dir)
    dream = subprocess.Popen(
        [str(DREAMKEEPER), "--agent", agent, "dream", "--heartbeat", "1"],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    seen: list[str] = []
    try:
        started = await asyncio.to_thread(_read_until, dream.stderr, "running (run ", seen)
        assert "Ctrl-C stops waiting, not the cycle" in started
        await asyncio.to_thread(_read_until, dream.stderr, "risky change(s):", seen)
        command = await asyncio.to_thread(_read_until, dream.stderr, "approve them all:", seen)
        beat = await asyncio.to_thread(_read_until, dream.stderr, "still waiting for", seen)
        assert "approval of 1 risky change(s)" in beat  # the high-value merge
        words = shlex.split(command.split(":", 1)[1])
        assert words == ["dreamkeeper", "--agent", agent, "dream", "approve"]
        approved = await _cli(env, *words[1:])  # exactly what it printed
        assert approved.returncode == 0, approved.stderr
        out, err = await asyncio.to_thread(dream.communicate, timeout=120)
    finally:
        if dream.poll() is None:
            dream.kill()
            dream.wait()
    assert dream.returncode == 0, "".join(seen) + err
    assert "dream cycle " in out and f"for agent {agent}:" in out and "undo with:" in out
    assert "? merge:" in "".join(seen)


async def test_no_wait_returns_with_the_run_id_while_the_cycle_goes_on(worker, temporal_env, llm):
    client, queue, settings = worker
    ensure_identity(settings.data_dir)
    agent = f"nw-{uuid.uuid4().hex[:6]}"
    approval._seed(settings, agent)
    write_approval(FileMemoryStore(settings.data_dir, agent).documents, "risky")
    llm.replies.append(approval._reply())
    env = _env(temporal_env, queue, settings.data_dir)

    started = await _cli(env, "--agent", agent, "dream", "--no-wait", "--json")
    assert started.returncode == 0, started.stderr
    run = json.loads(started.stdout)
    handle = client.get_workflow_handle(run["workflow_id"], run_id=run["run_id"])
    # The cycle is still running: it waits for an operator the CLI never was.
    consolidation = client.get_workflow_handle(dream_ops.consolidation_workflow_id(agent))
    while True:  # until the cycle has started its consolidation (no time is asserted)
        try:
            assert (await approval._pending(consolidation)).pending
            break
        except RPCError as exc:
            assert exc.status == RPCStatusCode.NOT_FOUND
            await asyncio.sleep(0.2)
    assert (await handle.describe()).status.name == "RUNNING"
    text = await _cli(env, "--agent", agent, "dream", "--no-wait")
    assert text.returncode == 0 and f"run {run['run_id']}" in text.stdout  # joins it

    assert (await _cli(env, "--agent", agent, "dream", "reject")).returncode == 0
    result = await handle.result()
    assert result["cycle_id"] == run["run_id"]  # what `dream undo` takes
    refused = await _cli(env, "--agent", agent, "dream", "--no-wait", "--dry-run")
    assert refused.returncode == 2 and "--no-wait" in refused.stderr
