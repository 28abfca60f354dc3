"""Facts that change: does recall return the current value, and is the old one history?

    .venv/bin/python bench/changing_facts.py [--subjects 60] [--distractors 300]
                                             [--seed 7] [--hybrid]

A generated set (seeded): subjects (people) with one changing attribute each (home
city, employer, manager, phone, team size, car), 2–5 versions saved months apart, each
worded differently ("lives in", "moved to", "is now based in", ...); distractors that
share words with them (other people in the same cities and companies, the same person's
unchanging facts); and unchanging facts. Every save goes through the save activities as
the SaveMemory workflow runs them (persist_original, then enrich_memory → save_fact →
retire_original with an LLM, or dedup_original without one), inside Temporal's
ActivityEnvironment on a real file store — no server: what is measured is the store,
dedup, supersede and search, not Temporal. Modes, each on its own store, in this run:

  - dedup    no LLM, no replaces: save-time dedup alone (what an agent that does not say
             what a fact replaces gets; the baseline the ratios are against)
  - agent    the agent names the entry each version replaces (save_memory(replaces=[id]))
  - llm      a scripted enrichment LLM (the real HTTP client against
             dreamkeeper.testing.scripted_llm) told the nearest entries; it proposes the
             right replacement and, for one save in three, wrong ones too: an id it was
             not shown, another subject's entry, the same subject's entry of another
             attribute, an entry already replaced, or the entry the note repeats

Metrics per mode (a subject's entries: those its saves produced):
  current@1           the first of the subject's entries in default search holds the
                      latest value (asked as a question: "Where does Maya Lund live?")
  stale-above-current an entry holding only an old value ranks above the first holding
                      the latest (or the latest is not found)
  as-of@1             asked as of the middle of each version's validity: the first of
                      the subject's entries holds that version's value
  history complete    history(current entry) holds every version's value
  versions lost       version values no entry holds any more (archived included)
  wrong supersedes    supersedes of an entry that is not an older version of the same
                      subject and attribute
Targets (known replacement: agent, llm): current@1 ≥ 0.9, stale-above-current ≤ 0.05,
as-of@1 ≥ 0.85, history complete 1.0, versions lost 0, wrong supersedes 0.
--hybrid adds the in-process embedding model (vectors as the embed step writes them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.testing import ActivityEnvironment

from dreamkeeper.activities.embeddings import EmbeddingActivities
from dreamkeeper.activities.save import SaveActivities
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.payloads import (
    EmbedInput,
    FactProposal,
    MarkInput,
    RetireInput,
    SaveFactInput,
    SaveInput,
)
from dreamkeeper.core.settings import HighValueFloor, LLMSettings
from dreamkeeper.core.validation import new_entry_id
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore
from dreamkeeper.stores.longterm.records import retired_into
from dreamkeeper.stores.longterm.supersede import history, successor
from dreamkeeper.stores.search.query import search
from dreamkeeper.testing.scripted_llm import Reply, ScriptedLLM
from dreamkeeper.workflows.save import derived_id

AGENT = "bench"
T0 = datetime(2024, 1, 10, 9, 0, tzinfo=UTC)
FIRST = ["Maya", "Tom", "Ana", "Li", "Omar", "Sara", "Ivan", "Noor", "Pablo", "Kenji",
         "Lea", "Raj", "Eva", "Hugo", "Zoe", "Amir", "Ines", "Jon", "Mila", "Theo"]  # fmt: skip
LAST = ["Lund", "Berg", "Ruiz", "Wei", "Haddad", "Costa", "Novak", "Sato", "Okafor",
        "Klein", "Moreau", "Silva", "Rossi", "Dahl", "Ferreira"]  # fmt: skip
CITIES = ["Lisbon", "Porto", "Oslo", "Bergen", "Lyon", "Turin", "Leeds", "Graz", "Ghent",
          "Malmo", "Cork", "Bilbao", "Krakow", "Tartu", "Aarhus"]  # fmt: skip
COMPANIES = ["Vexa", "Norrland Labs", "Quill", "Brightpath", "Orbital Foods", "Tessel",
             "Kite Health", "Ambertide", "Lumen Works", "Corvid Systems"]  # fmt: skip
CARS = ["Volvo V60", "Skoda Octavia", "Toyota Prius", "Kia Niro", "Fiat Panda",
        "Tesla Model 3", "Renault Zoe", "Mazda CX-5"]  # fmt: skip


@dataclass(frozen=True)
class Attribute:
    name: str
    category: str
    question: str
    templates: tuple[str, ...]


ATTRIBUTES = (
    Attribute(
        "city",
        "people/home",
        "Where does {n} live?",
        (
            "{n} lives in {v}.",
            "{n} moved to {v}.",
            "{n} is now based in {v}.",
            "{n}'s home is in {v} these days.",
            "{n} relocated to {v} last month.",
        ),
    ),
    Attribute(
        "employer",
        "people/work",
        "Where does {n} work?",
        (
            "{n} works at {v}.",
            "{n} joined {v}.",
            "{n} now has a job at {v}.",
            "{n}'s employer is {v}.",
        ),
    ),
    Attribute(
        "manager",
        "people/reports",
        "Who is {n}'s manager?",
        ("{n}'s manager is {v}.", "{n} now reports to {v}.", "{n}'s new boss is {v}."),
    ),
    Attribute(
        "phone",
        "people/contacts",
        "What is {n}'s phone number?",
        (
            "{n}'s phone number is {v}.",
            "{n} can be reached at {v}.",
            "{n} got a new number: {v}.",
        ),
    ),
    Attribute(
        "team",
        "people/teams",
        "How many people are on {n}'s team?",
        ("{n}'s team has {v} people.", "{n} leads a team of {v}.", "{n}'s team is {v} people now."),
    ),
    Attribute(
        "car",
        "people/cars",
        "What car does {n} drive?",
        ("{n} drives a {v}.", "{n} bought a {v}.", "{n}'s car is a {v}."),
    ),
)
DISTRACTORS = (
    ("people/home", "{o}'s sister lives in {c}."),
    ("people/home", "{n} spent a holiday in {c}."),
    ("people/home", "{o} grew up near {c}."),
    ("people/work", "{o} works at {co} too."),
    ("people/work", "The {co} office is in {c}."),
    ("people/reports", "{o} is a manager at {co}."),
    ("people/contacts", "{o}'s email is {e}@example.org."),
    ("people/teams", "{o}'s team meets on Mondays."),
    ("people/cars", "{o} rents a {car} when visiting {c}."),
    ("people/home", "{n} was born in {c}."),
)


def _value(attr: str, rng: random.Random, used: set[str]) -> str:
    while True:
        if attr == "city":
            v = rng.choice(CITIES)
        elif attr == "employer":
            v = rng.choice(COMPANIES)
        elif attr == "manager":
            v = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        elif attr == "phone":
            v = f"+1 {rng.randint(200, 989)}-{rng.randint(200, 989)}-{rng.randint(1000, 9999)}"
        elif attr == "team":
            v = str(rng.choice([3, 4, 5, 7, 9, 12, 15, 20, 25, 40]))
        else:
            v = rng.choice(CARS)
        if v not in used:
            used.add(v)
            return v


@dataclass
class Subject:
    name: str
    attr: Attribute
    values: list[str]
    texts: list[str]
    times: list[datetime]
    ids: set[str] = field(default_factory=set)  # entries its saves produced
    version_ids: list[str] = field(default_factory=list)  # the entry of each save

    def holds(self, content: str, index: int) -> bool:
        return (
            re.search(rf"(?<![\w+-]){re.escape(self.values[index])}(?![\w-])", content) is not None
        )


@dataclass
class Save:
    at: datetime
    text: str
    category: str
    subject: Subject | None = None
    version: int = 0


def generate(subjects: int, distractors: int, seed: int) -> tuple[list[Subject], list[Save]]:
    rng = random.Random(seed)
    names = [f"{f} {last}" for f in FIRST for last in LAST]
    rng.shuffle(names)
    people, saves = [], []
    for i in range(subjects):
        attr = ATTRIBUTES[i % len(ATTRIBUTES)]
        used: set[str] = set()
        count = rng.randint(2, 5)
        values = [_value(attr.name, rng, used) for _ in range(count)]
        start = T0 + timedelta(days=rng.randint(0, 60))
        times = [start + timedelta(days=90 * k + rng.randint(0, 30)) for k in range(count)]
        texts = [rng.choice(attr.templates).format(n=names[i], v=v) for v in values]
        subject = Subject(names[i], attr, values, texts, times)
        people.append(subject)
        saves += [
            Save(t, x, attr.category, subject, k)
            for k, (t, x) in enumerate(zip(times, texts, strict=True))
        ]
    others = names[subjects : subjects + 40]
    for _ in range(distractors):
        category, template = rng.choice(DISTRACTORS)
        text = template.format(
            n=rng.choice(people).name,
            o=rng.choice(others),
            c=rng.choice(CITIES),
            co=rng.choice(COMPANIES),
            car=rng.choice(CARS),
            e=f"x{rng.randint(100, 999)}",
        )
        saves.append(Save(T0 + timedelta(days=rng.randint(0, 500)), text, category))
    saves.sort(key=lambda s: s.at)
    return people, saves


class Bench:
    def __init__(self, mode: str, people: list[Subject], hybrid: bool, seed: int) -> None:
        self.mode = mode
        # This mode's own copy of each subject: the entries its saves produce here.
        self.people = [Subject(p.name, p.attr, p.values, p.texts, p.times) for p in people]
        self._mine = {id(orig): mine for orig, mine in zip(people, self.people, strict=True)}
        self.tmp = tempfile.TemporaryDirectory(prefix=f"dk-changing-{mode}-")
        self.clock = T0
        embeddings = None
        if hybrid:
            from dreamkeeper.stores.vectors.local_embeddings import LocalEmbeddings

            embeddings = LocalEmbeddings()
        self.registry = StoreRegistry(Path(self.tmp.name), embeddings=embeddings)
        self.llm = ScriptedLLM(responder=self._respond) if mode == "llm" else None
        llm_settings = (
            LLMSettings(base_url=self.llm.base_url, model="scripted", timeout_seconds=30)
            if self.llm
            else LLMSettings()
        )
        self.activities = SaveActivities(self.registry, llm_settings, HighValueFloor())
        self.embed = EmbeddingActivities(self.registry) if hybrid else None
        self.env = ActivityEnvironment()
        self.rng = random.Random(seed + 1)
        self.proposals = {"right": 0, "wrong": 0}
        self._current: Save | None = None

    def store(self) -> FileMemoryStore:
        with self.registry.using(AGENT) as store:
            assert isinstance(store, FileMemoryStore)
            store._clock = lambda: self.clock  # the agent's time of the save at hand
            return store

    # -- the scripted enrichment LLM ---------------------------------------------------

    def _respond(self, body: dict) -> Reply:
        save = self._current
        assert save is not None
        message = body["messages"][-1]["content"]
        shown = re.findall(r"^- \[([0-9a-f]{12})\]", message, re.M)
        fact: dict = {"content": save.text, "category": save.category}
        replaces: list[str] = []
        store = self.store()
        subject = self._mine[id(save.subject)] if save.subject is not None else None
        if subject is not None:
            for i in shown:
                entry = store.get(i)
                if entry is not None and i in subject.ids and entry.is_current:
                    replaces.append(i)
                    self.proposals["right"] += 1
        if self.rng.random() < 1 / 3:
            replaces += self._wrong(save, shown, store)
        if replaces:
            fact["replaces"] = replaces
        return Reply(json.dumps([fact]))

    def _wrong(self, save: Save, shown: list[str], store: FileMemoryStore) -> list[str]:
        kind = self.rng.choice(["unshown", "other", "attribute", "replaced", "self"])
        subject = self._mine[id(save.subject)] if save.subject is not None else None
        pool: list[str] = []
        if kind == "unshown":
            pool = [new_entry_id()]
        elif kind == "other":
            pool = [i for i in shown if subject is None or i not in subject.ids]
        elif kind == "attribute" and subject is not None:
            pool = [
                e.id
                for e in store.entries()
                if subject.name in e.content and e.id not in subject.ids
            ]
        elif kind == "replaced":
            pool = [e.id for e in store.entries() if e.is_superseded]
        elif kind == "self" and subject is not None:
            pool = [i for i in subject.ids if (e := store.get(i)) and e.content == save.text]
        if not pool:
            return []
        self.proposals["wrong"] += 1
        return [self.rng.choice(pool)]

    # -- saving ------------------------------------------------------------------------

    def save(self, save: Save) -> None:
        self.clock = save.at
        self.store()  # opens it with the bench's clock before the first save
        subject = self._mine[id(save.subject)] if save.subject is not None else None
        replaces: list[str] = []
        if self.mode == "agent" and subject is not None and save.version > 0:
            # The agent names the entry it was shown for the previous version (the one
            # its save landed in, if dedup or enrichment moved it).
            store = self.store()
            target = subject.version_ids[save.version - 1]
            while (found := store.get(target)) is not None and found.is_archived:
                into = retired_into(found)
                if not into:
                    break
                target = into[0]
            if found is not None and found.is_current:
                replaces = [target]
        entry_id = new_entry_id()
        inp = SaveInput(
            agent_id=AGENT,
            entry_id=entry_id,
            content=save.text,
            category=save.category,
            replaces=replaces,
        )
        self._current = save
        ack = self.env.run(self.activities.persist_original, inp)
        produced = [entry_id]
        if ack.enrich_skipped is not None:
            done = self.env.run(
                self.activities.dedup_original,
                MarkInput(agent_id=AGENT, entry_id=entry_id, enrichment=""),
            )
            produced = [done.entry_id]
        else:
            enriched = asyncio.run(self.env.run(self.activities.enrich_memory, inp))
            produced = []
            for index, fact in enumerate(enriched.facts):
                saved = self.env.run(
                    self.activities.save_fact,
                    SaveFactInput(
                        agent_id=AGENT,
                        new_id=derived_id(entry_id, index),
                        op_id=f"{entry_id}-{index}",
                        fact=FactProposal.model_validate(fact.model_dump()),
                        exclude=[entry_id],
                        touched=sorted(set(produced)),
                    ),
                )
                produced.append(saved.entry_id)
            if produced:
                self.env.run(
                    self.activities.retire_original,
                    RetireInput(
                        agent_id=AGENT,
                        entry_id=entry_id,
                        into=sorted(set(produced)),
                        reason=f"enriched into [{', '.join(sorted(set(produced)))}]",
                    ),
                )
            else:
                produced = [entry_id]
        if self.embed is not None:
            self.env.run(
                self.embed.embed_entries, EmbedInput(agent_id=AGENT, ids=[entry_id, *produced])
            )
        if subject is not None:
            subject.ids.update(produced)
            subject.version_ids.append(produced[0])

    def run(self, saves: list[Save]) -> float:
        started = time.perf_counter()
        for save in saves:
            self.save(save)
        return time.perf_counter() - started

    # -- measuring ---------------------------------------------------------------------

    def measure(self) -> dict[str, float]:
        self.clock = T0 + timedelta(days=900)
        store = self.store()
        everything = store.entries(include_archived=True)
        current1 = stale = asof_hits = asof_total = complete = lost = 0
        for p in self.people:
            latest = len(p.values) - 1
            hits = [h.entry for h in search(store, p.attr.question.format(n=p.name), limit=50)]
            mine = [e for e in hits if e.id in p.ids]
            first_current = next(
                (r for r, e in enumerate(mine) if p.holds(e.content, latest)), None
            )
            if mine and p.holds(mine[0].content, latest):
                current1 += 1
            stale_ranks = [
                r
                for r, e in enumerate(mine)
                if not p.holds(e.content, latest)
                and any(p.holds(e.content, k) for k in range(latest))
            ]
            if stale_ranks and (first_current is None or min(stale_ranks) < first_current):
                stale += 1
            for k in range(len(p.values)):
                end = p.times[k + 1] if k < latest else p.times[k] + timedelta(days=60)
                moment = p.times[k] + (end - p.times[k]) / 2
                found = [
                    h.entry
                    for h in search(store, p.attr.question.format(n=p.name), as_of=moment, limit=50)
                    if h.entry.id in p.ids
                ]
                asof_total += 1
                asof_hits += bool(found) and p.holds(found[0].content, k)
            if first_current is not None:
                chain = history(store, mine[first_current].id)
                if all(any(p.holds(e.content, k) for e in chain) for k in range(len(p.values))):
                    complete += 1
            lost += sum(
                1
                for k in range(len(p.values))
                if not any(p.holds(e.content, k) for e in everything)
            )
        wrong = 0
        owner = {i: p for p in self.people for i in p.ids}
        for e in everything:
            if e.superseded_by is None:
                continue
            p = owner.get(e.id)
            nxt = successor(store, e)
            if p is None or nxt not in p.ids:
                wrong += 1
        n = len(self.people)
        return {
            "current@1": current1 / n,
            "stale-above-current": stale / n,
            "as-of@1": asof_hits / asof_total,
            "history complete": complete / n,
            "versions lost": lost,
            "wrong supersedes": wrong,
            "superseded": sum(1 for e in everything if e.is_superseded),
        }

    def close(self) -> None:
        if self.llm is not None:
            self.llm.close()
        self.tmp.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subjects", type=int, default=60)
    parser.add_argument("--distractors", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--hybrid", action="store_true", help="with the local embedding model")
    args = parser.parse_args()
    people, saves = generate(args.subjects, args.distractors, args.seed)
    versions = sum(len(p.values) for p in people)
    print(
        f"{len(people)} subjects, {versions} versions, {len(saves) - versions} distractors "
        f"({'hybrid' if args.hybrid else 'keyword'} search)"
    )
    results = {}
    for mode in ("dedup", "agent", "llm"):
        bench = Bench(mode, people, args.hybrid, args.seed)
        try:
            seconds = bench.run(saves)
            results[mode] = bench.measure()
            if mode == "llm":
                results[mode]["proposals right/wrong"] = (
                    f"{bench.proposals['right']}/{bench.proposals['wrong']}"
                )
        finally:
            bench.close()
        print(f"  {mode:<6} saved in {seconds:.1f} s")
    keys = list(results["agent"])
    print(f"\n{'metric':<24}" + "".join(f"{m:>12}" for m in results) + f"{'agent/dedup':>13}")
    for key in keys:
        row = f"{key:<24}"
        for mode in results:
            value = results[mode].get(key, "")
            row += f"{value:>12.3f}" if isinstance(value, float) else f"{value!s:>12}"
        base, agent = results["dedup"].get(key), results["agent"].get(key)
        if isinstance(base, float) and isinstance(agent, float) and base:
            row += f"{agent / base:>13.2f}"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
