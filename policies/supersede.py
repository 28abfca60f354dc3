"""Whether an LLM's "this fact replaces that entry" is believable: pure, deterministic.

An LLM (enrichment, consolidation) may say a new fact makes an old entry outdated. The
store checks that the old entry is live, current and unchanged since it was shown
(`stores.longterm.supersede`); this checks what the store cannot know, that the two are
about the same thing:

- **same category** (exactly: "people/maya" does not replace "people/tom");
- **not a repeat**: a text covering the old one says nothing new, it does not replace
  it (that is a reinforcement, or an extension);
- **the same subject**: when both name someone or something (a run of capitalised
  words other than a common sentence starter such as "The" or "User"), their first
  names are one name ("Maya" and "Maya Lund" are; "Sara Okafor" and "Sara Sato" are
  not) — the first name is taken as what the fact is about; when either names nothing,
  they share at least two fact words beyond a short list that nearly every fact has
  ("user", "my", "in", "now", ...).

Biased toward refusing: a wrongly refused supersede leaves both versions current (the
stale one may still rank first, as without this feature, until the next dream), while a
wrongly applied one hides a true fact from default recall. So "Porto is where Maya lives
now" (first name Porto) does not replace "Maya lives in Lisbon". What this cannot catch:
a proposal about the same subject in the same category but another attribute ("Maya's
manager is Ana" for "Maya's mentor is Tom" under one category).
"""

from __future__ import annotations

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.dedup import covers, fact_words

# Words nearly every saved fact shares: they say nothing about which thing it is about.
_COMMON = frozenset(
    "user users i my me we our you your he she they his her their them in on at to for "
    "with from by as now new currently current still also".split()
)
_STARTERS = _COMMON | frozenset("the a an this that these those it there".split())


def _names(text: str) -> list[tuple[str, ...]]:
    """Runs of capitalised words in order ("Maya Lund", "Porto"), a sentence's first
    word too unless it is a common starter such as "The" or "User"; lowercased,
    possessive dropped."""
    found: list[tuple[str, ...]] = []
    run: list[str] = []
    for word in text.split():
        bare = word.strip(".,;:!?()[]\"'")
        name = bare.lower().removesuffix("'s").removesuffix("’s")
        if bare[:1].isupper() and name not in _STARTERS:
            run.append(name)
            if word.rstrip(".,;:!?)]\"'") != word or name != bare.lower():
                found.append(tuple(run))  # punctuation or a possessive ends the name
                run = []
            continue
        if run:
            found.append(tuple(run))
            run = []
    if run:
        found.append(tuple(run))
    return found


def _same_name(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """One name, possibly written shorter: "Maya" is "Maya Lund"; "Sara Okafor" is not
    "Sara Sato"."""
    return set(a) <= set(b) or set(b) <= set(a)


def objection(old: MemoryEntry, new_content: str, new_category: str | None) -> str | None:
    """Why `new_content` may not replace `old` (None: it may)."""
    if (old.category or None) != (new_category or None):
        return "another category"
    if covers(new_content, old.content, old.category):
        return "a repeat, not a change"
    old_names, new_names = _names(old.content), _names(new_content)
    if old_names and new_names:
        # The first name is taken as what the fact is about: "Tom's sister lives in
        # Porto" shares Porto with "Maya moved to Porto" but is not about Maya.
        return None if _same_name(old_names[0], new_names[0]) else "another subject"
    shared = (fact_words(old.content) & fact_words(new_content)) - _COMMON
    if len(shared) >= 2:
        return None
    return "no shared subject"
