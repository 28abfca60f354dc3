"""A year of dream cycles against an adversarial LLM: does any memory get lost?

    .venv/bin/python bench/dream_year.py [--cycles 730] [--corpus 300] [--seed 1] [--subtle 0.25]

Every cycle is a real `Dream` workflow (purge → consolidation → preference inference →
decay) on a real dev server with an in-process worker, `as_of` advancing 12 hours a
cycle (a year at twice a day). New facts arrive between cycles — fresh ones,
near-duplicates, exact copies, status chatter. The LLM is `adversary.Adversary`.

Prints what was lost and how, hard deletions before retention, the live-entry count
over the year, the share gating withheld in steady state, and LLM prompt tokens per
cycle against sending the whole corpus every cycle (the reference's behaviour before
gating). `tests/workflows/test_dream_year.py` runs a 20-cycle variant of the same code.

With `--subtle` (default 0.25) a fifth of the corpus are habits whose telling words are
ordinary ones, and that share of the adversary's merges drop such a word (every specific
kept, so coverage passes them): the recall gate's figures — false-undo rate on honest
merges, catch rate on lossy merges that passed coverage, its share of cycle time.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.client import Client

from dreamkeeper.activities.dream_prompts import (
    consolidation_messages,
    prompt_tokens,
)
from dreamkeeper.activities.dream_review import RECALL_REJECTED
from dreamkeeper.core.dream_payloads import ConsolidationOptions, DreamInput, DreamResult
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.settings import DEFAULT_FLOOR
from dreamkeeper.policies.consolidation import EPHEMERAL_REASON
from dreamkeeper.policies.coverage import Source, find_missing_specifics
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.workflows.dream import Dream
from dreamkeeper.workflows.dream_gate import RECALL_REGRESSION
from tests.harness.adversary import Adversary, Fact, new_fact, variant

AGENT = "year"
START = datetime(2026, 1, 1, 6, 0, tzinfo=UTC)
RETENTION = timedelta(days=90)
MERGED_PREFIX = "merged into "


@dataclass
class Tracked:
    """What the bench remembers of every entry it ever saw, live or not."""

    content: str
    category: str | None
    high: bool = False  # above the floor when last seen live
    reason: str | None = None  # archive reason
    archived_at: datetime | None = None
    purged_at: datetime | None = None


@dataclass
class YearReport:
    cycles: int
    corpus: int
    created: int = 0
    live: list[int] = field(default_factory=list)
    withheld_pct: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    baseline_tokens: list[int] = field(default_factory=list)
    high_value_lost: list[str] = field(default_factory=list)
    other_lost: list[str] = field(default_factory=list)
    ephemeral_lost: Counter = field(default_factory=Counter)  # category -> specifics
    early_purges: list[str] = field(default_factory=list)
    # Invariant 3: a rejected merge's sources never leave through the prune path, even
    # when they are below the floor (their losses would otherwise pass as "ephemeral").
    rejected_sources_pruned: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)  # gone without a purge
    merges: int = 0
    rejected: int = 0
    protected: int = 0
    pruned: int = 0
    ignored_ids: int = 0
    failed_batches: int = 0
    seconds: float = 0.0
    adversary: dict[str, int] = field(default_factory=dict)
    # The recall gate: merges that passed coverage, by the adversary's label.
    gate_kept: Counter = field(default_factory=Counter)
    gate_undone: Counter = field(default_factory=Counter)
    gate_seconds: float = 0.0
    cycle_seconds: float = 0.0

    @property
    def false_undo_rate(self) -> float | None:
        honest = self.gate_kept["honest"] + self.gate_undone["honest"]
        return self.gate_undone["honest"] / honest if honest else None

    @property
    def lossy_passing_coverage(self) -> int:
        return sum(self.gate_kept[k] + self.gate_undone[k] for k in ("lossy", "subtle"))

    @property
    def catch_rate(self) -> float | None:
        caught = self.gate_undone["lossy"] + self.gate_undone["subtle"]
        total = self.lossy_passing_coverage
        return caught / total if total else None

    @property
    def steady_withheld(self) -> float:
        tail = self.withheld_pct[len(self.withheld_pct) // 2 :]
        return statistics.mean(tail) if tail else 0.0


def seed_corpus(
    store: FileMemoryStore, rng: random.Random, n: int, at: datetime, rich: bool = False
) -> list[Fact]:
    facts: list[Fact] = []
    while len(facts) < n:
        fact = (
            variant(rng.choice(facts), rng) if facts and rng.random() < 0.2 else new_fact(rng, rich)
        )
        facts.append(fact)
        _save(store, fact, at - timedelta(days=rng.randint(0, 120)))
    return facts


def _save(store: FileMemoryStore, fact: Fact, at: datetime) -> MemoryEntry:
    entry = store.create(fact.content, category=fact.category, importance=fact.importance, now=at)
    if fact.reinforcement > 1:
        entry = store.put(
            entry.model_copy(update={"reinforcement_count": fact.reinforcement}),
            action=JournalAction.REINFORCED,
            reason="seeded",
        )
    return entry


def arrivals(
    store: FileMemoryStore, rng: random.Random, facts: list[Fact], at: datetime, rich=False
) -> int:
    """What an agent saves between two cycles."""
    made = 0
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        roll = rng.random()
        if roll < 0.15:
            fact = rng.choice(facts)  # an exact copy: the fold's job
        elif roll < 0.4:
            fact = variant(rng.choice(facts), rng)
        else:
            fact = new_fact(rng, rich)
            facts.append(fact)
        _save(store, fact, at)
        made += 1
    return made


def snapshot(store: FileMemoryStore, tracked: dict[str, Tracked], as_of: datetime, report) -> None:
    store.reload()
    present = {e.id: e for e in store.entries(include_archived=True)}
    for eid, entry in present.items():
        t = tracked.setdefault(eid, Tracked(entry.content, entry.category))
        t.content = entry.content
        if entry.is_archived:
            t.reason, t.archived_at = entry.archive_reason, entry.archived_at
        else:
            t.high = DEFAULT_FLOOR.protects(entry)
            t.reason = t.archived_at = None
    for eid, t in tracked.items():
        if eid in present or t.purged_at is not None:
            continue
        if t.archived_at is None:
            report.vanished.append(eid)
        elif as_of - t.archived_at < RETENTION or t.high:
            report.early_purges.append(eid)
        t.purged_at = as_of


def fate(eid: str, tracked: dict[str, Tracked]) -> tuple[str, str | None]:
    """Follow `merged into` links to where an entry's content went last: ("live", None),
    ("ephemeral", category of the pruned entry) or ("other", reason)."""
    seen = set()
    while eid not in seen:
        seen.add(eid)
        t = tracked.get(eid)
        if t is None:
            return "other", "unknown id"
        if t.reason is None and t.purged_at is None:
            return "live", None
        if t.reason and t.reason.startswith(MERGED_PREFIX):
            eid = t.reason[len(MERGED_PREFIX) :]
            continue
        if t.reason == EPHEMERAL_REASON and not t.high:
            return "ephemeral", t.category
        return "other", t.reason
    return "other", "merge cycle"


def losses(store: FileMemoryStore, tracked: dict[str, Tracked], report: YearReport) -> None:
    live_text = "\n".join(e.content for e in store.entries())
    for eid, t in tracked.items():
        if t.reason == RECALL_REJECTED:
            # A merge the recall gate undid: its sources are live again and checked
            # themselves; what only the merged text had (a repair's appended list) was
            # never a memory of its own.
            continue
        specifics = find_missing_specifics([Source(t.content, t.category)], "")
        lost = [s for s in specifics if find_missing_specifics([Source(s)], live_text)]
        if not lost:
            continue
        kind, detail = fate(eid, tracked)
        if t.high:
            report.high_value_lost += [f"{eid}: {s}" for s in lost]
        if kind == "ephemeral":
            report.ephemeral_lost[detail or "-"] += len(lost)
        else:
            report.other_lost += [f"{eid} ({kind}: {detail}): {s}" for s in lost]


async def run_year(
    client: Client,
    queue: str,
    data_dir: Path,
    adversary: Adversary,
    *,
    cycles: int,
    corpus: int,
    seed: int,
    progress=None,
    rich: bool = False,
) -> YearReport:
    rng = random.Random(seed)
    store = FileMemoryStore(data_dir, AGENT, clock=lambda: START)
    facts = seed_corpus(store, rng, corpus, START, rich)
    report = YearReport(cycles=cycles, corpus=corpus, created=corpus)
    tracked: dict[str, Tracked] = {}
    snapshot(store, tracked, START, report)
    began = time.perf_counter()
    for cycle in range(cycles):
        as_of = START + timedelta(hours=12 * (cycle + 1))
        report.created += arrivals(store, rng, facts, as_of - timedelta(hours=1), rich)
        live_before = store.entries()
        baseline = prompt_tokens(consolidation_messages(live_before, [], []))
        started = time.perf_counter()
        result: DreamResult = await client.execute_workflow(
            Dream.run,
            # Nobody approves here: prunes past the weekly cap wait a moment, then are
            # dropped (not applied) and proposed again by a later cycle.
            DreamInput(
                agent_id=AGENT,
                as_of=as_of,
                consolidation=ConsolidationOptions(approval_timeout_minutes=0.01),
            ),
            id=f"dream-{AGENT}-{cycle}",
            task_queue=queue,
        )
        report.cycle_seconds += time.perf_counter() - started
        c = result.consolidation
        report.gate_seconds += c.gate_seconds
        snapshot(store, tracked, as_of, report)
        gate_labels(store, c, adversary, as_of, report)
        report.live.append(len(store.entries()))
        report.withheld_pct.append(100.0 * c.withheld / c.total if c.total else 0.0)
        report.tokens.append(c.prompt_tokens)
        report.baseline_tokens.append(baseline)
        report.merges += len(c.merged)
        report.rejected += len(c.rejected)
        report.protected += len(c.protected)
        report.pruned += len(c.pruned)
        rejected_sources = {s for r in c.rejected for s in r.sources}
        report.rejected_sources_pruned += sorted(rejected_sources.intersection(c.pruned))
        report.ignored_ids += len(c.ignored_ids)
        report.failed_batches += c.batches_failed
        if progress is not None:
            progress(cycle, c, report)
    report.seconds = time.perf_counter() - began
    losses(store, tracked, report)
    report.adversary = dict(adversary.tried)
    return report


def gate_labels(store, c, adversary: Adversary, as_of: datetime, report: YearReport) -> None:
    """Sort the merges that passed coverage this cycle by what the adversary meant them
    to be: kept by the recall gate, or undone by it."""
    for m in c.merged:
        entry = store.get(m.new_id)
        if entry is not None:
            report.gate_kept[adversary.labels.get(entry.content, "other")] += 1
    if any(r.reason == RECALL_REGRESSION for r in c.rejected):
        for entry in store.entries(include_archived=True):
            if entry.archive_reason == RECALL_REJECTED and entry.archived_at == as_of:
                report.gate_undone[adversary.labels.get(entry.content, "other")] += 1


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def print_gate(r: YearReport) -> None:
    honest = r.gate_kept["honest"] + r.gate_undone["honest"]
    share = r.gate_seconds / r.cycle_seconds if r.cycle_seconds else 0.0
    print(
        f"recall gate: false-undo rate on honest merges {_rate(r.false_undo_rate)} "
        f"({r.gate_undone['honest']} of {honest}); catch rate on lossy merges that passed "
        f"coverage {_rate(r.catch_rate)} ({r.gate_undone['lossy'] + r.gate_undone['subtle']} "
        f"of {r.lossy_passing_coverage}: subtle {r.gate_undone['subtle']}/"
        f"{r.gate_kept['subtle'] + r.gate_undone['subtle']}, lossy {r.gate_undone['lossy']}/"
        f"{r.gate_kept['lossy'] + r.gate_undone['lossy']}); other merges (repairs) kept "
        f"{r.gate_kept['other']}, undone {r.gate_undone['other']}"
    )
    print(
        f"recall gate time: {r.gate_seconds:.2f} s of {r.cycle_seconds:.1f} s of cycles "
        f"-> {100 * share:.2f}% of cycle time"
    )


def print_report(r: YearReport) -> None:
    mean_tokens = statistics.mean(r.tokens) if r.tokens else 0
    mean_base = statistics.mean(r.baseline_tokens) if r.baseline_tokens else 0
    eph = sum(r.ephemeral_lost.values())
    print(
        f"\n== {r.cycles} dream cycles, {r.corpus} seeded entries, {r.created} created in all "
        f"({r.seconds:.0f} s, real Dream workflows) =="
    )
    print(
        f"specifics of high-value entries in no live entry:        {len(r.high_value_lost)}"
        "   (target 0)"
    )
    print(
        f"specifics lost other than by ephemeral below-floor prune: {len(r.other_lost)}"
        "   (target 0)"
    )
    print(
        f"specifics lost by ephemeral prunes of below-floor entries: {eph}   "
        f"({', '.join(f'{k}: {v}' for k, v in sorted(r.ephemeral_lost.items())) or 'none'})"
    )
    print(
        f"sources of rejected merges pruned as ephemeral:          "
        f"{len(r.rejected_sources_pruned)}   (target 0)"
    )
    print(
        f"hard deletions before retention or above the floor:      {len(r.early_purges)}"
        "   (target 0)"
    )
    print(
        f"entries gone without a purge:                            {len(r.vanished)}   (target 0)"
    )
    for line in (r.high_value_lost + r.other_lost)[:10]:
        print(f"   lost: {line}")
    step = max(1, r.cycles // 10)
    series = ", ".join(f"{i + 1}:{r.live[i]}" for i in range(0, r.cycles, step))
    print(f"live entries by cycle: {series}, {r.cycles}:{r.live[-1]}")
    print(
        f"withheld by gating, steady state (second half): {r.steady_withheld:.1f}%  "
        f"(first cycle {r.withheld_pct[0]:.1f}%)"
    )
    ratio = mean_tokens / mean_base if mean_base else 0.0
    print(
        f"LLM prompt tokens per cycle: mean {mean_tokens:.0f} vs whole-corpus baseline "
        f"{mean_base:.0f} -> {ratio:.3f}x (steady state "
        f"{statistics.mean(r.tokens[len(r.tokens) // 2 :]):.0f})"
    )
    print(
        f"consolidation: {r.merges} merges saved, {r.rejected} rejected, {r.protected} prunes "
        f"refused by the floor, {r.pruned} pruned, {r.ignored_ids} ids ignored, "
        f"{r.failed_batches} failed batches"
    )
    print("adversary tried: " + ", ".join(f"{k} {v}" for k, v in sorted(r.adversary.items())))
    print_gate(r)


async def main(cycles: int, corpus: int, seed: int, subtle: float = 0.25) -> int:
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.testing import WorkflowEnvironment

    from dreamkeeper.client.attributes import SEARCH_ATTRIBUTES
    from dreamkeeper.core.settings import LLMSettings, StoreSettings
    from dreamkeeper.testing.scripted_llm import ScriptedLLM
    from dreamkeeper.worker.temporal_worker import build_worker

    adversary = Adversary(seed, subtle=subtle)
    llm = ScriptedLLM(responder=adversary)
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(Path(sys.executable).parent / "temporal"),
        data_converter=pydantic_data_converter,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=["--headless"],
    )
    data = Path(tempfile.mkdtemp(prefix="dk-bench-year-"))
    try:
        with ThreadPoolExecutor(4) as pool:
            worker = build_worker(
                env.client,
                StoreSettings(data_dir=data),
                task_queue="bench-year",
                executor=pool,
                llm=LLMSettings(base_url=llm.base_url, model="adversary", timeout_seconds=30),
            )
            async with worker:

                def progress(cycle, c, report):
                    if (cycle + 1) % max(1, cycles // 20) == 0:
                        print(
                            f"cycle {cycle + 1}: live {report.live[-1]}, reviewed {c.reviewed} "
                            f"of {c.total}, merged {len(c.merged)}, rejected "
                            f"{len(c.rejected)}, pruned {len(c.pruned)}",
                            flush=True,
                        )

                report = await run_year(
                    env.client,
                    "bench-year",
                    data,
                    adversary,
                    cycles=cycles,
                    corpus=corpus,
                    seed=seed,
                    progress=progress,
                    rich=subtle > 0,
                )
    finally:
        await env.shutdown()
        llm.close()
    print_report(report)
    failed = (
        report.high_value_lost
        or report.other_lost
        or report.rejected_sources_pruned
        or report.early_purges
        or report.vanished
    )
    return 1 if failed else 0


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=730)
    parser.add_argument("--corpus", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--subtle",
        type=float,
        default=0.25,
        help="share of the adversary's merges that drop an ordinary word (0: the old corpus)",
    )
    args = parser.parse_args()
    return asyncio.run(main(args.cycles, args.corpus, args.seed, args.subtle))
