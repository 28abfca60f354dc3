"""A year of dreams' raw material: a corpus with names, emails, phones, numbers and
dates, new facts arriving over time, and an adversarial consolidation LLM.

The adversary answers like a careless model would: lossy merges (listing every source in
toDelete, the shape that destroyed memories in production), prunes of high-value
entries, hallucinated ids, malformed replies — and also honest merges of duplicates and
honest prunes of status chatter. Its draws depend on the seed and the request; its
first consolidation reply mounts every attack at once (a hallucinated id, a prune of a
high-value entry, a lossy merge of unrelated entries) and its first repair is lossy, so
even a short run is guaranteed to test each safeguard.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass

from dreamkeeper.testing.scripted_llm import Reply

FIRST = [
    "Trish",
    "Duane",
    "Allen",
    "Lacey",
    "Carl",
    "Matt",
    "Nadia",
    "Oskar",
    "Priya",
    "Quinn",
    "Ravi",
    "Sofia",
    "Tomas",
    "Ulla",
    "Viktor",
    "Wanda",
    "Xavier",
    "Yusuf",
    "Zelda",
    "Bram",
    "Celine",
    "Dmitri",
    "Esther",
    "Farid",
    "Greta",
    "Hiro",
    "Ingrid",
    "Jonas",
    "Kemal",
    "Lorna",
]
LAST = [
    "Roberts",
    "Lhotka",
    "Conway",
    "Franklin",
    "Okafor",
    "Lindqvist",
    "Haddad",
    "Moreau",
    "Novak",
    "Ishikawa",
    "Petrov",
    "Schultz",
    "Varga",
    "Whitfield",
    "Zamora",
    "Brennan",
    "Castillo",
    "Dunmore",
    "Eriksen",
    "Fairweather",
]
COMPANIES = [
    "Xebia",
    "Contoso",
    "Fabrikam",
    "Northwind",
    "Tailspin",
    "Litware",
    "Adatum",
    "Proseware",
    "Woodgrove",
    "Wingtip",
]
CITIES = [
    "Atlanta",
    "Denver",
    "Lisbon",
    "Tallinn",
    "Osaka",
    "Nairobi",
    "Valparaiso",
    "Bergen",
    "Krakow",
    "Halifax",
]
EVENTS = ["VS Live", "NDC Oslo", "Build", "KubeCon", "PyCon", "DevIntersection"]
CODES = ["Falcon", "Juniper", "Basalt", "Quartz", "Meridian", "Tundra", "Cobalt", "Sierra"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
CHATTER = [
    "checking the build status for run {n}",
    "waiting on deploy {n} to finish",
    "retrying the flaky test in job {n}",
    "pinged the monitor, queue depth {n}",
]


HABITS = [
    "prefers the window seat on long flights",
    "drinks oolong tea every afternoon",
    "collects vintage maps of harbours",
    "plays the cello in a quartet",
    "keeps bees on the roof",
    "rides a tandem bicycle at weekends",
    "bakes sourdough with a rye starter",
    "restores clockwork automatons",
    "climbs limestone crags",
    "writes haiku about trains",
]


@dataclass(frozen=True)
class Fact:
    content: str
    category: str
    importance: float
    reinforcement: int = 1


def _person(rng: random.Random) -> tuple[str, str]:
    return rng.choice(FIRST), rng.choice(LAST)


def new_fact(rng: random.Random, rich: bool = False) -> Fact:
    """One fact, with a fresh mix of specifics. `rich`: a share of facts are habits, whose
    telling words are ordinary ones (what coverage cannot see; the recall gate's case)."""
    if rich and rng.random() < 0.2:
        first, last = _person(rng)
        habit = rng.choice(HABITS)
        return Fact(f"{first} {last} {habit}.", "people/habits", round(rng.uniform(0.3, 0.7), 2))
    first, last = _person(rng)
    kind = rng.random()
    importance = round(rng.uniform(0.3, 0.75), 2)
    reinforcement = 1
    roll = rng.random()
    if roll < 0.15:
        importance = round(rng.uniform(0.85, 0.99), 2)
    elif roll < 0.25:
        reinforcement = rng.choice([5, 8, 41, 73, 106, 214])
    if kind < 0.25:
        company = rng.choice(COMPANIES)
        text = (
            f"{first} {last}'s email is {first.lower()}.{last.lower()}@{company.lower()}.com "
            f"and phone +1 {rng.randint(201, 989)}-{rng.randint(200, 999)}-"
            f"{rng.randint(1000, 9999)}."
        )
        return Fact(text, "people/contacts", importance, reinforcement)
    if kind < 0.5:
        text = (
            f"{first} {last} works at {rng.choice(COMPANIES)} in {rng.choice(CITIES)} "
            f"since {rng.randint(2005, 2025)}."
        )
        return Fact(text, "people/work", importance, reinforcement)
    if kind < 0.7:
        day = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        text = f"Met {first} {last} at {rng.choice(EVENTS)} on {day}."
        return Fact(text, "events", importance, reinforcement)
    if kind < 0.85:
        text = (
            f"Project {rng.choice(CODES)}{rng.randint(10, 99)} budget is "
            f"{rng.randint(12, 900) * 1000} dollars, due {rng.choice(MONTHS)} "
            f"{rng.randint(1, 28)}, 2027."
        )
        return Fact(text, "projects", importance, reinforcement)
    text = rng.choice(CHATTER).format(n=rng.randint(100, 9999))
    return Fact(text, "status", round(rng.uniform(0.05, 0.2), 2))


def variant(fact: Fact, rng: random.Random) -> Fact:
    """A near-duplicate: the same specifics, worded a little differently."""
    swaps = [
        (" works at ", " is working at "),
        (" is ", " was noted as "),
        ("Met ", "I met "),
        (" budget is ", " has a budget of "),
        (" and phone ", " plus phone "),
    ]
    text = fact.content
    for old, new in rng.sample(swaps, len(swaps)):
        if old in text:
            text = text.replace(old, new, 1)
            break
    else:
        text = text.rstrip(".") + " (noted again)."
    return Fact(text, fact.category, fact.importance, 1)


_ENTRY = re.compile(
    r"^\d+\. \[ID:([0-9a-f]+)\] category=(\S+) importance=([\d.]+) reinforced=(\d+)×[^\n]*\n"
    r"(.*?)(?=\n\n\d+\. \[ID:|\n\nLikely duplicates|\n\nRecent feedback|\Z)",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Shown:
    id: str
    category: str
    importance: float
    reinforcement: int
    content: str


def parse_prompt(text: str) -> tuple[list[Shown], list[list[str]]]:
    shown = [Shown(m[1], m[2], float(m[3]), int(m[4]), m[5].strip()) for m in _ENTRY.finditer(text)]
    hints = []
    if "Likely duplicates" in text:
        block = text.split("Likely duplicates", 1)[1].split("\n\nRecent feedback", 1)[0]
        hints = [line[2:].split(", ") for line in block.splitlines() if line.startswith("- ")]
    return shown, hints


class Adversary:
    """Answers consolidation, repair and preference prompts; counts what it tried."""

    def __init__(self, seed: int, subtle: float = 0.0) -> None:
        """`subtle`: the share of hinted groups merged keeping every specific but dropping
        the batch's rarest ordinary word (lossy in a way coverage cannot see)."""
        self.seed = seed
        self.subtle = subtle
        self.labels: dict[str, str] = {}  # merged text -> honest | lossy | subtle
        self.calls = 0
        self.consolidations = 0
        self.repairs = 0
        self.tried: dict[str, int] = {}

    def _rng(self, body: dict) -> random.Random:
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        return random.Random(f"{self.seed}:{self.calls}:{digest}")

    def _count(self, what: str, n: int = 1) -> None:
        self.tried[what] = self.tried.get(what, 0) + n

    def __call__(self, body: dict) -> Reply:
        self.calls += 1
        rng = self._rng(body)
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        if "infer lasting preferences" in system:
            return Reply(json.dumps({"toSave": []}))
        if "dropped details" in system:
            self.repairs += 1
            merged = user.rsplit("Merged text:\n", 1)[-1]
            missing = system.split("verbatim: ", 1)[1].split(". Reply", 1)[0]
            if self.repairs > 1 and rng.random() < 0.5:
                self._count("honest repairs")
                return Reply(json.dumps({"content": f"{merged} ({missing})"}))
            self._count("lossy repairs")
            return Reply(json.dumps({"content": merged}))
        self.consolidations += 1
        opening = self.consolidations == 1  # every attack at once, never wasted
        if not opening and rng.random() < 0.08:
            self._count("malformed replies")
            return Reply(rng.choice(["{not json", "[]", '{"toSave": "everything"}']))
        shown, hints = parse_prompt(user)
        by_id = {s.id: s for s in shown}
        to_save, to_delete = [], []
        used: set[str] = set()
        for group in hints:
            members = [by_id[i] for i in group if i in by_id and i not in used]
            if len(members) < 2:
                continue
            roll = rng.random()
            if self.subtle and rng.random() < self.subtle:
                content = _drop_rarest_word(members, shown)
                if content is None:
                    continue
                self._count("subtle lossy merges")
                self.labels[content] = "subtle"
            elif roll < 0.5:
                self._count("honest merges")
                content = "\n".join(dict.fromkeys(m.content for m in members))
                self.labels[content] = "honest"
            elif roll < 0.8:
                self._count("lossy merges")
                content = members[0].content.split(" and ", 1)[0].split(" since ", 1)[0]
                self.labels[content] = "lossy"
            else:
                continue
            ids = [m.id for m in members]
            used.update(ids)
            to_save.append(
                {"content": content, "category": members[0].category, "sourceIds": ids, "tags": []}
            )
            to_delete += ids  # the prompt-following shape: every source in toDelete
        loose = [s for s in shown if s.id not in used]
        if len(loose) >= 2 and (opening or rng.random() < 0.3):
            a, b = rng.sample(loose, 2)
            self._count("lossy merges of unrelated entries")
            to_save.append(
                {"content": a.content, "category": a.category, "sourceIds": [a.id, b.id]}
            )
            to_delete += [a.id, b.id]
        # The opening's high-value prune targets an entry no merge uses, so the floor —
        # not the merge-source rule — is what must refuse it.
        sourced = {i for m in to_save for i in m["sourceIds"]}
        first_high = next(
            (
                s.id
                for s in shown
                if s.id not in sourced and (s.importance >= 0.8 or s.reinforcement >= 5)
            ),
            None,
        )
        for s in shown:
            high = s.importance >= 0.8 or s.reinforcement >= 5
            if high and ((opening and s.id == first_high) or rng.random() < 0.3):
                self._count("prunes of high-value entries")
                to_delete.append(s.id)
            elif s.category == "status" and rng.random() < 0.8:
                self._count("honest prunes of chatter")
                to_delete.append(s.id)
            elif not high and s.category != "status" and rng.random() < 0.01:
                self._count("prunes of ordinary below-floor entries")
                to_delete.append(s.id)
        if opening or rng.random() < 0.3:
            fake = [f"{rng.getrandbits(48):012x}" for _ in range(rng.randint(1, 3))]
            self._count("hallucinated ids", len(fake))
            to_delete += fake
            others = [s for s in shown if s.id != first_high]
            if others:
                real = rng.choice(others)
                to_save.append(
                    {
                        "content": real.content,
                        "category": real.category,
                        "sourceIds": [real.id, fake[0]],
                    }
                )
        return Reply(json.dumps({"toDelete": to_delete, "toSave": to_save}))


_WORD = re.compile(r"\b[a-z]{4,}\b")


def _drop_rarest_word(members: list[Shown], shown: list[Shown]) -> str | None:
    """The members' texts joined, minus the lowercase word they share that is rarest in
    the batch (ties: alphabetical) — every capitalized word, number and address kept."""
    counts: dict[str, int] = {}
    for s in shown:
        for w in set(_WORD.findall(s.content)):
            counts[w] = counts.get(w, 0) + 1
    shared = [set(_WORD.findall(m.content)) for m in members]
    words = sorted(set.intersection(*shared)) if shared else []
    if not words:
        return None
    rarest = min(words, key=lambda w: (counts.get(w, 0), w))
    text = "\n".join(dict.fromkeys(m.content for m in members))
    return re.sub(rf"\s*\b{rarest}\b", "", text)
