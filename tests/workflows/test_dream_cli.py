"""`dreamkeeper dream` through a real worker (#17): a dry run's diff and JSON plan,
applying that plan, undoing the run it made."""

from __future__ import annotations

import json

import pytest

from dreamkeeper.stores.identity import ensure_identity
from dreamkeeper.stores.memory_store import FileMemoryStore
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
