"""`dreamkeeper dream`: run a cycle, preview it (`--dry-run`, a readable diff or
`--json`), apply a saved plan (`--apply PLAN`), set the agent's approval setting
(`--set-approval`); and its actions `dream undo RUN_ID`, `dream pending`,
`dream approve [KEY ...]`, `dream reject [KEY ...]`.

A cycle run in the foreground says on stderr what it waits for: the run it started, the
risky changes waiting for an operator with the exact commands that decide them, and a
heartbeat while it waits; `--no-wait` starts it and returns with its run id.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from typing import TYPE_CHECKING, Any, Literal, TextIO

from pydantic import ValidationError

from dreamkeeper.cli.common import (
    Subparsers,
    add_json,
    memory_client,
    remote_client,
    require_store,
    service_settings,
)
from dreamkeeper.core.dream_payloads import DreamResult
from dreamkeeper.core.dream_plan import ApplyPlanResult, ApprovalState, DreamPlan, UndoResult
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.core.validation import validate_cycle_id
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.dream_state.dream_settings import write_approval
from dreamkeeper.stores.search.query import display_text

if TYPE_CHECKING:
    from temporalio.client import WorkflowHandle

    from dreamkeeper.agent.client import MemoryClient

MAX_PLAN_BYTES = 64 * 1_048_576
SNIPPET = 160
HEARTBEAT_SECONDS = 30.0
# How often a waiting `dream` asks the cycle what it waits for (a query: no history).
PENDING_POLL_SECONDS = 2.0


def _text(store: MemoryStore, entry_id: str) -> str:
    entry = store.get(entry_id)
    if entry is None:
        return "(no longer in the store)"
    text = display_text(entry.content)
    return text if len(text) <= SNIPPET else text[: SNIPPET - 1] + "…"


def format_plan(plan: DreamPlan, store: MemoryStore) -> str:
    out = [f"dream plan for agent {plan.agent_id} as of {plan.as_of:%Y-%m-%d %H:%M} UTC"]
    out.append(f"({plan.summary()}; nothing was applied)")
    for fold in plan.folds:
        out.append(f"\nfold: exact duplicates into {fold.survivor}")
        out += [f"  - {c}: {_text(store, c)}" for c in fold.copies]
    for merge in plan.merges:
        out.append(f"\nmerge into {merge.new_id} ({len(merge.sources)} sources)")
        for sid in merge.sources:
            out.append(f"  - {sid} r{merge.revisions.get(sid, '?')}: {_text(store, sid)}")
        out += [
            f"  + {line}" for line in display_text(merge.content, keep_newlines=True).split("\n")
        ]
    if plan.prunes:
        out.append("\nprune (archive, recoverable until purged)")
        out += [f"  - {p.id} r{p.revision}: {_text(store, p.id)}" for p in plan.prunes]
    if plan.refusals:
        out.append("\nrefused")
        out += [f"  ! [{', '.join(r.ids)}] {r.reason}" for r in plan.refusals]
    if plan.purge:
        out.append("\npurge (hard delete: archived past the retention)")
        out += [f"  x {i}: {_text(store, i)}" for i in plan.purge]
    if plan.decay:
        out.append(f"\ndecay importance of {len(plan.decay)} entr(ies)")
        out += [f"  ~ {d.id}: {d.before:.2f} -> {d.after:.2f}" for d in plan.decay[:50]]
        if len(plan.decay) > 50:
            out.append(f"  ~ ... and {len(plan.decay) - 50} more")
    if plan.skipped:
        out.append("\nnot planned: " + "; ".join(plan.skipped))
    out.append(
        "\nto apply exactly this: dreamkeeper dream --dry-run --json > plan.json, then "
        "dreamkeeper dream --apply plan.json"
    )
    return "\n".join(out)


def format_applied(res: ApplyPlanResult) -> str:
    out = [
        f"applied plan for agent {res.agent_id} (run {res.cycle_id}): {len(res.merged)} "
        f"merge(s), {len(res.pruned)} prune(s), {len(res.folded)} fold(s), purged "
        f"{len(res.purged)}, decayed {res.decayed}"
    ]
    out += [f"  refused [{', '.join(r.ids)}]: {r.reason}" for r in res.refused]
    out.append(f"undo with: dreamkeeper dream undo {res.cycle_id}")
    return "\n".join(out)


def format_undo(res: UndoResult) -> str:
    out = [res.summary()]
    out += [f"  left alone {i}: {why}" for i, why in sorted(res.touched.items())]
    return "\n".join(out)


def read_plan(path: str) -> DreamPlan:
    try:
        if path == "-":
            data = sys.stdin.buffer.read(MAX_PLAN_BYTES + 1)
        else:
            with open(path, "rb") as handle:
                data = handle.read(MAX_PLAN_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_PLAN_BYTES:
        raise InvalidInput(f"{path} is larger than a plan can be")
    try:
        raw = safe_json.loads(data, max_bytes=MAX_PLAN_BYTES, max_depth=8)
        return DreamPlan.model_validate(raw.get("plan", raw) if isinstance(raw, dict) else raw)
    except (ValueError, ValidationError) as exc:
        raise InvalidInput(f"{path} is not a dream plan: {str(exc).splitlines()[0]}") from None


def format_approval(state: ApprovalState) -> str:
    out = [f"pending {len(state.pending)}"]
    out += [f"  ? {p.key}: {p.kind} of [{', '.join(p.ids)}] ({p.why})" for p in state.pending]
    out += [f"  approved {k}" for k in state.approved]
    out += [f"  rejected {k}" for k in state.rejected]
    out += [f"  timed out {k}" for k in state.timed_out]
    return "\n".join(out)


def _through_serve(args: argparse.Namespace, what: str) -> bool:
    """True when --url (or DREAMKEEPER_URL) names a serve; `what` (a local-only form) is
    then refused rather than done on another store than the one named."""
    url = service_settings(args).url
    if url and what:
        raise InvalidInput(
            f"dream {what} cannot go through a serve ({url}): run it without --url "
            "(and DREAMKEEPER_URL) where the worker's data directory is"
        )
    return bool(url)


def _cycle_flags(args: argparse.Namespace) -> list[str]:
    """The options of `dream` alone given (they make no sense with an action)."""
    given = (
        ("--dry-run", args.dry_run),
        ("--apply", args.apply is not None),
        ("--set-approval", args.set_approval is not None),
        ("--no-wait", args.no_wait),
    )
    return [name for name, on in given if on]


def _no_cycle_flags(args: argparse.Namespace) -> None:
    if flags := _cycle_flags(args):
        raise InvalidInput(f"{flags[0]} goes with `dream` alone, not `dream {args.dream_action}`")


def undo(args: argparse.Namespace, settings: StoreSettings) -> int:
    """`dream undo RUN_ID`: revert a cycle's changes that nothing has touched since."""
    from dreamkeeper.agent import dream_ops

    _no_cycle_flags(args)
    # Before anything connects: a malformed id is the caller's to fix (exit 2), and it
    # must never reach a workflow id or an activity that would retry it.
    validate_cycle_id(args.run_id)
    _through_serve(args, "undo")
    require_store(settings)

    async def go() -> UndoResult:
        return await dream_ops.undo(await memory_client(settings), settings.agent_id, args.run_id)

    res = asyncio.run(go())
    print(res.model_dump_json(indent=2) if args.json else format_undo(res))
    return 0 if res.found else 2


def approval(args: argparse.Namespace, settings: StoreSettings) -> int:
    """`dream pending | approve [KEY ...] | reject [KEY ...]` (no KEY: all pending), on
    the agent's current cycle, or the Consolidation workflow --run names."""
    from dreamkeeper.agent import dream_ops

    _no_cycle_flags(args)
    action: Literal["pending", "approve", "reject"] = args.dream_action
    keys: list[str] = getattr(args, "keys", [])
    if _through_serve(args, "--run" if args.run_id is not None else ""):
        remote = remote_client(args)
        assert remote is not None
        state = asyncio.run(remote.dream_approval(settings.agent_id, action, keys))
    else:
        require_store(settings)
        workflow_id = args.run_id or dream_ops.consolidation_workflow_id(settings.agent_id)

        async def go() -> ApprovalState:
            memory = await memory_client(settings)
            if action == "pending":
                return await dream_ops.pending(memory, workflow_id)
            return await dream_ops.decide(memory, workflow_id, keys, approve=action == "approve")

        state = asyncio.run(go())
    print(state.model_dump_json(indent=2) if args.json else format_approval(state))
    return 0


def _remote_cycle(args: argparse.Namespace, settings: StoreSettings) -> int:
    """Through a serve: run a cycle (its route); the other forms of `dream` alone need
    the worker's client here, so they are refused."""
    if flags := _cycle_flags(args):
        _through_serve(args, flags[0])
    remote = remote_client(args)
    assert remote is not None
    agent = settings.agent_id
    print(
        f"dream cycle for agent {agent} running through {remote.url}; this waits for it to "
        f"finish (risky changes waiting for approval: `dreamkeeper --url {remote.url} "
        f"--agent {agent} dream pending`, then approve or reject)",
        file=sys.stderr,
        flush=True,
    )
    result = asyncio.run(remote.run_dream(agent))
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        print(f"dream cycle {result.cycle_id} for agent {agent}: {result.consolidation.summary()}")
    return 0


def dream(args: argparse.Namespace, settings: StoreSettings) -> int:
    """`dream` alone: run a cycle, --dry-run it, --apply a plan, or --set-approval."""
    from dreamkeeper.agent import dream_ops

    if _through_serve(args, ""):
        return _remote_cycle(args, settings)
    agent = settings.agent_id
    if args.apply is None or args.agent is not None:
        require_store(settings)  # with --apply and no --agent: the plan's agent, below
    if args.set_approval is not None:
        # Where the agent's every cycle reads it: the configured backend's documents.
        write_approval(open_backend(settings).documents(agent), args.set_approval)
        print(f"approval for agent {agent}: {args.set_approval} (every cycle from the next)")
        return 0
    if args.apply is not None and args.dry_run:
        raise InvalidInput("give --dry-run or --apply, not both")
    if args.no_wait and (args.apply is not None or args.dry_run):
        raise InvalidInput("--no-wait starts a cycle: not with --dry-run or --apply")
    if args.apply is not None:
        plan = read_plan(args.apply)
        if plan.agent_id != agent and args.agent is not None:
            raise InvalidInput(f"the plan is for agent {plan.agent_id!r}, not {agent!r}")
        require_store(settings, plan.agent_id)

        async def apply() -> ApplyPlanResult:
            return await dream_ops.apply_plan(await memory_client(settings), plan)

        applied = asyncio.run(apply())
        print(applied.model_dump_json(indent=2) if args.json else format_applied(applied))
        return 0

    async def run() -> DreamResult | None:
        memory = await memory_client(settings)
        if args.dry_run:
            return await dream_ops.dry_run(memory, agent)
        handle = await memory.start_dream(agent)
        if args.no_wait:
            _print_started(args, agent, handle)
            return None
        return await follow_cycle(
            memory, handle, agent, decide_with=_decide_command(args, agent), every=args.heartbeat
        )

    result = asyncio.run(run())
    if result is None:
        return 0
    if args.dry_run:
        assert result.plan is not None
        if args.json:
            print(result.plan.model_dump_json(indent=2))
        else:
            print(format_plan(result.plan, open_backend(settings).memory(agent)))
        return 0
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        print(f"dream cycle {result.cycle_id} for agent {agent}: {result.consolidation.summary()}")
        print(f"undo with: dreamkeeper dream undo {result.cycle_id}")
    return 0


# -- a cycle in the foreground -----------------------------------------------------------


def _decide_command(args: argparse.Namespace, agent: str) -> str:
    """The command line that reaches this cycle again (`dreamkeeper [--data D] --agent A
    dream`), for the approve and reject lines a waiting cycle prints."""
    words = ["dreamkeeper"]
    if args.data is not None:
        words += ["--data", args.data]
    words += ["--agent", agent, "dream"]
    return shlex.join(words)


def _run_id(handle: WorkflowHandle[Any, DreamResult]) -> str:
    return handle.result_run_id or handle.first_execution_run_id or handle.run_id or "?"


def _print_started(args: argparse.Namespace, agent: str, handle: WorkflowHandle[Any, Any]) -> None:
    run_id = _run_id(handle)
    if args.json:
        print(json.dumps({"agent_id": agent, "workflow_id": handle.id, "run_id": run_id}))
        return
    command = _decide_command(args, agent)
    print(f"dream cycle for agent {agent} started: workflow {handle.id}, run {run_id}")
    print(f"risky changes waiting for approval: {command} pending (then approve / reject)")
    print(f"once it has finished, undo with: {command} undo {run_id}")


def _format_waiting(state: ApprovalState, decide_with: str) -> str:
    out = [f"waiting for an operator to decide {len(state.pending)} risky change(s):"]
    out += [f"  ? {p.key}: {p.kind} of [{', '.join(p.ids)}] ({p.why})" for p in state.pending]
    out.append(f"approve them all:  {decide_with} approve")
    out.append(f"or one by one:     {decide_with} approve KEY ...  /  {decide_with} reject KEY ...")
    out.append(
        "(what is not decided within the cycle's approval timeout, 60 minutes by default, "
        "is dropped, never applied)"
    )
    return "\n".join(out)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


async def follow_cycle(
    memory: MemoryClient,
    handle: WorkflowHandle[Any, DreamResult],
    agent: str,
    *,
    decide_with: str,
    every: float = HEARTBEAT_SECONDS,
    out: TextIO | None = None,
) -> DreamResult:
    """Wait for the cycle's result, saying on `out` (stderr) what it waits for: once at
    the start, when risky changes start waiting for approval (with the commands that
    decide them), and every `every` seconds meanwhile."""
    from dreamkeeper.agent import dream_ops

    say = out or sys.stderr
    loop = asyncio.get_running_loop()
    started = loop.time()
    print(
        f"dream cycle for agent {agent} running (run {_run_id(handle)}); Ctrl-C stops "
        "waiting, not the cycle",
        file=say,
        flush=True,
    )
    result = asyncio.ensure_future(handle.result())
    shown: list[str] = []
    last_beat = started
    try:
        while True:
            done, _ = await asyncio.wait({result}, timeout=min(PENDING_POLL_SECONDS, every))
            if done:
                return result.result()
            state = await _pending_or_none(memory, dream_ops.consolidation_workflow_id(agent))
            keys = [p.key for p in state.pending] if state is not None else shown
            now = loop.time()
            if keys and keys != shown:
                assert state is not None
                print(_format_waiting(state, decide_with), file=say, flush=True)
                last_beat = now
            elif now - last_beat >= every:
                what = f"approval of {len(keys)} risky change(s)" if keys else "the cycle"
                print(
                    f"... still waiting for {what} ({_minutes(now - started)} so far)",
                    file=say,
                    flush=True,
                )
                last_beat = now
            shown = keys
    finally:
        result.cancel()


async def _pending_or_none(memory: MemoryClient, workflow_id: str) -> ApprovalState | None:
    """What the consolidation waits on; None when the query could not be answered now
    (a worker busy or restarting): the heartbeat goes on."""
    from temporalio.client import WorkflowQueryFailedError
    from temporalio.service import RPCError

    from dreamkeeper.agent import dream_ops

    try:
        return await dream_ops.pending(memory, workflow_id)
    except (RPCError, WorkflowQueryFailedError):
        return None


# -- the parsers -------------------------------------------------------------------------


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError("must be more than 0 and at most 86400 seconds")
    return value


def register(sub: Subparsers) -> None:
    """`dream` and its actions, each a parser of its own: `dream` alone runs a cycle.
    An action's --json defaults to SUPPRESS, so `dream --json pending` keeps it: the
    action's parser writes only what it was given over the namespace `dream` filled."""
    p = sub.add_parser(
        "dream", help="run a dream cycle; --dry-run previews it, `dream undo RUN_ID` reverts one"
    )
    p.set_defaults(handler=dream, dream_action=None)
    p.add_argument(
        "--set-approval",
        choices=["off", "risky", "all"],
        help="the agent's approval setting for every later cycle (written to its store)",
    )
    p.add_argument("--dry-run", action="store_true", help="plan the cycle, apply nothing")
    p.add_argument(
        "--no-wait",
        action="store_true",
        help="start the cycle and print its run id; do not wait for it",
    )
    p.add_argument(
        "--heartbeat",
        type=_positive_seconds,
        default=HEARTBEAT_SECONDS,
        metavar="SECONDS",
        help=f"while waiting, say so on stderr this often (default {HEARTBEAT_SECONDS:g})",
    )
    p.add_argument("--apply", metavar="PLAN", help="apply exactly this plan (a file, or -)")
    add_json(p)
    actions = p.add_subparsers(
        dest="dream_action",
        metavar="ACTION",
        title="actions",
        description="none: run a dream cycle, as the options above say",
    )

    a = actions.add_parser("undo", help="revert a cycle (its run id, as `dream` printed it)")
    a.set_defaults(handler=undo)
    a.add_argument("run_id", metavar="RUN_ID", help="the dream run id to undo")
    add_json(a, default=argparse.SUPPRESS)

    for name, what in (
        ("pending", "the risky changes waiting for a decision, with their keys"),
        ("approve", "apply waiting changes (no KEY: every one)"),
        ("reject", "refuse waiting changes (no KEY: every one)"),
    ):
        a = actions.add_parser(name, help=what)
        a.set_defaults(handler=approval)
        if name != "pending":
            a.add_argument("keys", nargs="*", metavar="KEY", help="merge:ID or prune:ID")
        # dest run_id, as undo's RUN_ID: one name for "which run" in every handler.
        a.add_argument(
            "--run", dest="run_id", help="the Consolidation workflow id (default: the agent's)"
        )
        add_json(a, default=argparse.SUPPRESS)
