"""`dreamkeeper dream` through a real worker: a dry run's diff and JSON plan,
applying that plan, undoing the run it made; deciding a waiting cycle's risky changes."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest

from dreamkeeper.agent import dream_ops
from dreamkeeper.core.dream_payloads import ConsolidationInput, ConsolidationResult
from dreamkeeper.stores.identity import ensure_identity
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore
from dreamkeeper.workflows.consolidation import Consolidation
from tests.workflows import test_dream_approval as approval
from tests.workflows.test_cli_through_worker import _cli, _env
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
