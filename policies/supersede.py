"""Whether "this fact replaces that entry" is believable: pure, deterministic.

An agent (`replaces=`), an LLM (enrichment, consolidation) or save-time conflict
detection may say a new fact makes an old entry outdated. The store checks that the old
entry is live, current and unchanged since it was shown (`stores.longterm.supersede`);
this checks what the store cannot know, that the two are about the same thing:

- **compatible categories**: both filed under the same top-level category, or either
  filed nowhere ("people/maya" may replace "people/home"; "work" never "people");
- **not a repeat**: a text covering the old one says nothing new, it does not replace
  it (that is a reinforcement, or an extension);
- **the same subject**: one entity *and* one attribute (`policies.subject`): Lumen's
  lead, the user's employer, Marcus's phone number — whichever word comes first, so
  "Yusuf took over as Lumen lead" replaces "Priya leads Lumen", and "Mei started a new
  job" never replaces "Mei is allergic to cats". An attribute that holds several values
  at once (allergies, preferences) is replaced only by a fact about the same value
  ("prefers detailed answers" for "prefers short answers", not "prefers tea"). When a
  text names no entity, the two must share an attribute and two fact words beyond a
  short list that nearly every fact has.

Biased toward refusing: a wrongly refused supersede leaves both versions current (recall
shows them as a dated conflict, newer first, until a dream or the agent settles it),
while a wrongly applied one hides a true fact from default recall. The reasons are
content-free (the attribute vocabulary's names, never the text's words): they go to
logs, workflow results and the agent.

`likely_conflict` is the stricter question save-time detection asks when nobody said
what a fact replaces: the same named subject and the same one-value attribute from the
vocabulary, with another value.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.dedup import covers, fact_words
from dreamkeeper.policies.subject import (
    Entity,
    Subject,
    other_value,
    same_attribute,
    share_a_name,
    shares_value,
    subject_of,
)

# Words nearly every saved fact shares: they say nothing about which thing it is about.
_COMMON = frozenset(
    "user users i my me we our you your he she they his her their them in on at to for "
    "with from by as now new currently current still also".split()
)

ANOTHER_CATEGORY = "another category"
A_REPEAT = "a repeat, not a change"
ANOTHER_SUBJECT = "another subject"
NO_SHARED_SUBJECT = "no shared subject"


@dataclass(frozen=True)
class Verdict:
    """Whether the new fact may replace the old one, and why (content-free)."""

    allowed: bool
    reason: str
    old: Subject | None = None
    new: Subject | None = None


def _top(category: str | None) -> str | None:
    return None if not category else category.split("/", 1)[0]


def _attribute_name(subject: Subject) -> str:
    return subject.attribute if subject.known and subject.attribute else "something else"


def judge(old: MemoryEntry, new_content: str, new_category: str | None) -> Verdict:
    """May `new_content` (filed under `new_category`) replace `old`? See the module."""
    old_top, new_top = _top(old.category), _top(new_category)
    if old_top is not None and new_top is not None and old_top != new_top:
        return Verdict(False, ANOTHER_CATEGORY)
    if covers(new_content, old.content, old.category):
        return Verdict(False, A_REPEAT)
    before, after = subject_of(old.content), subject_of(new_content)
    if before.entity is not None and after.entity is not None:
        if not before.entity.same_as(after.entity):
            return Verdict(False, ANOTHER_SUBJECT, before, after)
        if before.attribute is None or after.attribute is None:
            return _by_shared_words(old.content, new_content, before, after)
        if not same_attribute(before, after):
            return Verdict(
                False,
                f"another attribute ({_attribute_name(after)}, not {_attribute_name(before)})",
                before,
                after,
            )
        if before.known and not before.single and not shares_value(before, after):
            return Verdict(
                False, f"another {before.attribute} (both may hold at once)", before, after
            )
        if not before.known and _other_specifics(before, after):
            # An attribute outside the vocabulary may hold several values ("had lunch
            # with Sara", "had lunch with Omar"): another name or number is no change.
            return Verdict(False, "another value of an unknown attribute", before, after)
        return Verdict(
            True, f"same subject and attribute ({_attribute_name(after)})", before, after
        )
    if before.known and after.known and not same_attribute(before, after):
        return Verdict(
            False,
            f"another attribute ({_attribute_name(after)}, not {_attribute_name(before)})",
            before,
            after,
        )
    return _by_shared_words(old.content, new_content, before, after)


def _by_shared_words(old_text: str, new_text: str, before: Subject, after: Subject) -> Verdict:
    """With no entity to compare: two facts naming different people or things are not
    one subject ("3 people report to Lea", "20 people report to Ana"); otherwise they
    must share two fact words."""
    if before.names and after.names and not share_a_name(before, after):
        return Verdict(False, ANOTHER_SUBJECT, before, after)
    # The names are what both are about, not what they say about it.
    named = {w for name in (*before.names, *after.names) for w in name}
    shared = (fact_words(old_text) & fact_words(new_text)) - _COMMON - named
    if len(shared) >= 2:
        return Verdict(True, "no named subject: two fact words shared", before, after)
    return Verdict(False, NO_SHARED_SUBJECT, before, after)


def _other_specifics(before: Subject, after: Subject) -> bool:
    """Whether both give specifics — names other than the entity, numbers — and share
    none ("Ivan Costa" and "Ivan Klein" are two people)."""

    def named(subject: Subject) -> list[Entity]:
        return [
            Entity("name", n)
            for n in subject.names
            if subject.entity is None or not subject.entity.same_as(Entity("name", n))
        ]

    def numbers(subject: Subject) -> set[str]:
        return {w for w in subject.specifics if any(ch.isdigit() for ch in w)}

    mine, theirs = named(before), named(after)
    if not (mine or numbers(before)) or not (theirs or numbers(after)):
        return False
    if any(a.same_as(b) for a in mine for b in theirs):
        return False
    return not numbers(before) & numbers(after)


def objection(old: MemoryEntry, new_content: str, new_category: str | None) -> str | None:
    """Why `new_content` may not replace `old` (None: it may)."""
    verdict = judge(old, new_content, new_category)
    return None if verdict.allowed else verdict.reason


def likely_conflict(old: MemoryEntry, new_content: str, new_category: str | None) -> bool:
    """Whether a fact saved with no word on what it replaces probably changes `old`:
    allowed to replace it, about a written (or, for a bare note like "Moved to
    Denver", the user's) entity, by a one-value vocabulary attribute, with another
    value."""
    verdict = judge(old, new_content, new_category)
    before, after = verdict.old, verdict.new
    return (
        verdict.allowed
        and before is not None
        and after is not None
        and before.entity is not None
        and after.entity is not None
        and before.known
        and before.single
        and same_attribute(before, after)
        and other_value(before, after)
    )
