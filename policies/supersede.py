"""Whether "this fact replaces that entry" is believable: pure, deterministic.

An agent (`replaces=`), an LLM (enrichment, consolidation) or save-time conflict
detection may say a new fact makes an old entry outdated. The store checks that the old
entry is live, current and unchanged since it was shown (`stores.longterm.supersede`);
this checks what the store cannot know, that the two are about the same thing — and
answers in three values (`Sameness`), because a vocabulary of attributes cannot know
every way a change is worded:

- **different**, positively: filed under two top-level categories ("work" never
  "people"); a repeat (a text covering the old one says nothing new: that is a
  reinforcement); two entities ("Tom's sister" is not Tom; "Maya" is not "Ana" when
  neither fact names the other's); two vocabulary attributes that are not worded as
  each other ("allergic to" is no home); two values of a many-valued attribute ("allergic
  to cats", "allergic to peanuts"); nothing in common at all.
- **the same subject**: one entity *and* one attribute (`policies.subject`): Lumen's
  lead, the user's employer, Marcus's phone number — whichever word comes first, so
  "Yusuf took over as Lumen lead" replaces "Priya leads Lumen". The attribute is the
  vocabulary's or, where the vocabulary cannot tell, a `Reading`'s: the attribute whose
  question an embedding model finds the fact answers ("Ana is renting in Ghent" answers
  "Where does Ana live?"). Decided by the vocabulary alone (`Verdict.by_rules`) or with
  a reading.
- **cannot tell**: the same entity, but an attribute neither the vocabulary nor a
  reading names ("Omar switched to a Mazda"), two related attributes ("left for a role
  at Quill" beside "works at Vexa"), another value of an attribute outside the
  vocabulary ("had lunch with Sara", "had lunch with Omar"), an entity one fact names in
  another role ("Ambertide brought Ana on board" beside "Ana works at Vexa").

"Cannot tell" is never treated as "different": a `replaces` the check cannot confirm is
not refused, and not applied either — both facts stay current, linked as a possible
change and dated in recall (`stores.longterm.conflicts`), until an agent, an LLM or a
reading settles it; recall ranks the newer first only for a question about the pair's
own subject (`newer_answers`). Only "different" refuses. The reasons are content-free (the
vocabulary's attribute names, never the text's words): they go to logs, workflow
results and the agent.

`likely_conflict` is the question save-time detection asks when nobody said what a fact
replaces: the same subject (by the vocabulary, or `strict=False` with readings) of a
one-value attribute, with another value. The dream settles only what the vocabulary
confirms (`strict`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.dedup import covers, fact_words
from dreamkeeper.policies.subject import (
    ATTRIBUTES,
    Entity,
    Reading,
    Subject,
    attribute_words,
    by_name,
    other_value,
    related,
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
UNCLEAR_ENTITY = "cannot tell whose fact it is"
UNCLEAR_ATTRIBUTE = "cannot tell which attribute"
UNKNOWN_VALUE = "another value of an attribute outside the vocabulary"


class Sameness(StrEnum):
    SAME = "same"
    DIFFERENT = "different"
    UNKNOWN = "cannot tell"


@dataclass(frozen=True)
class Verdict:
    """Whether the new fact is about the same subject as the old one, and why
    (content-free). `attribute`: the vocabulary attribute both are about, when known;
    `by_rules`: decided by the vocabulary alone, no reading needed."""

    sameness: Sameness
    reason: str
    old: Subject | None = None
    new: Subject | None = None
    attribute: str | None = None
    by_rules: bool = True

    @property
    def allowed(self) -> bool:
        return self.sameness is Sameness.SAME


def _top(category: str | None) -> str | None:
    return None if not category else category.split("/", 1)[0]


def _attribute_name(subject: Subject) -> str:
    return subject.attribute if subject.known and subject.attribute else "something else"


def _read(reading: Reading | None) -> str | None:
    return reading.attribute() if reading is not None else None


def judge(
    old: MemoryEntry,
    new_content: str,
    new_category: str | None,
    *,
    old_reading: Reading | None = None,
    new_reading: Reading | None = None,
) -> Verdict:
    """Is `new_content` (filed under `new_category`) about the same subject as `old`?
    The readings, when an embedding model gave them, settle what the vocabulary cannot
    tell (see the module)."""
    old_top, new_top = _top(old.category), _top(new_category)
    if old_top is not None and new_top is not None and old_top != new_top:
        return Verdict(Sameness.DIFFERENT, ANOTHER_CATEGORY)
    if covers(new_content, old.content, old.category):
        return Verdict(Sameness.DIFFERENT, A_REPEAT)
    before, after = subject_of(old.content), subject_of(new_content)
    if before.entity is not None and after.entity is not None:
        if not before.entity.same_as(after.entity):
            return _other_entities(before, after)
        return _one_entity(
            (old.content, before), (new_content, after), _read(old_reading), _read(new_reading)
        )
    mine, theirs = before.known_attribute, after.known_attribute
    if mine is not None and theirs is not None and not related(mine, theirs):
        return _another_attribute(before, after)
    return _by_shared_words(old.content, new_content, before, after)


def _other_entities(before: Subject, after: Subject) -> Verdict:
    """Two entities: another subject, unless one fact names the other's entity in
    another role ("Ambertide brought Ana Berg on board" beside "Ana Berg works at
    Vexa"), where the vocabulary may have taken the wrong name for the entity."""
    assert before.entity is not None and after.entity is not None
    if before.entity.relation == after.entity.relation and (
        _names(after, before.entity) or _names(before, after.entity)
    ):
        return Verdict(Sameness.UNKNOWN, UNCLEAR_ENTITY, before, after)
    return Verdict(Sameness.DIFFERENT, ANOTHER_SUBJECT, before, after)


def _names(subject: Subject, entity: Entity) -> bool:
    return entity.kind == "name" and any(entity.same_as(Entity("name", n)) for n in subject.names)


def _another_attribute(before: Subject, after: Subject) -> Verdict:
    return Verdict(
        Sameness.DIFFERENT,
        f"another attribute ({_attribute_name(after)}, not {_attribute_name(before)})",
        before,
        after,
    )


def _one_entity(
    old: tuple[str, Subject], new: tuple[str, Subject], old_read: str | None, new_read: str | None
) -> Verdict:
    """One entity: is it one attribute? The vocabulary's answer where it has one for
    both; else each side's attribute by the vocabulary or its reading."""
    (old_text, before), (new_text, after) = old, new
    known_before, known_after = before.known_attribute, after.known_attribute
    if known_before is not None and known_after is not None:
        if known_before == known_after:
            return _one_attribute(before, after, known_before, by_rules=True)
        if not related(known_before, known_after):
            return _another_attribute(before, after)
        if old_read is not None and old_read == new_read:
            # Worded as each other ("left for a role at" and "works at"), and both
            # readings name one attribute: that one.
            return _one_attribute(before, after, old_read, by_rules=False)
        return Verdict(Sameness.UNKNOWN, UNCLEAR_ATTRIBUTE, before, after)
    mine = known_before if known_before is not None else old_read
    theirs = known_after if known_after is not None else new_read
    if mine is not None and mine == theirs:
        return _one_attribute(before, after, mine, by_rules=False)
    if before.attribute is not None and before.attribute == after.attribute:
        if not _other_specifics(before, after):
            # One attribute outside the vocabulary, worded alike, and no other names
            # or numbers: "the wifi password is ..." twice.
            return Verdict(Sameness.SAME, "same entity and wording", before, after)
        # Outside the vocabulary an attribute may hold several values ("had lunch with
        # Sara", "had lunch with Omar"): another name or number proves no change.
        return Verdict(Sameness.UNKNOWN, UNKNOWN_VALUE, before, after)
    if before.attribute is None or after.attribute is None:
        named = {w for name in (*before.names, *after.names) for w in name}
        shared = (fact_words(old_text) & fact_words(new_text)) - _COMMON - named
        if len(shared) >= 2:
            return Verdict(Sameness.SAME, "same entity: two fact words shared", before, after)
    return Verdict(Sameness.UNKNOWN, UNCLEAR_ATTRIBUTE, before, after)


def _one_attribute(before: Subject, after: Subject, name: str, *, by_rules: bool) -> Verdict:
    attribute = by_name(name)
    if attribute is not None and not attribute.single and not shares_value(before, after):
        return Verdict(Sameness.DIFFERENT, f"another {name} (both may hold at once)", before, after)
    return Verdict(
        Sameness.SAME,
        f"same subject and attribute ({name})" + ("" if by_rules else ", by reading"),
        before,
        after,
        attribute=name,
        by_rules=by_rules,
    )


def _by_shared_words(old_text: str, new_text: str, before: Subject, after: Subject) -> Verdict:
    """With no entity to compare: two facts naming different people or things are not
    one subject ("3 people report to Lea", "20 people report to Ana"); two sharing two
    fact words are; two sharing nothing at all are not; the rest cannot be told."""
    if before.names and after.names and not share_a_name(before, after):
        return Verdict(Sameness.DIFFERENT, ANOTHER_SUBJECT, before, after)
    # The names are what both are about, not what they say about it.
    named = {w for name in (*before.names, *after.names) for w in name}
    shared = (fact_words(old_text) & fact_words(new_text)) - _COMMON - named
    if len(shared) >= 2:
        attribute = before.attribute if before.known else None
        return Verdict(
            Sameness.SAME, "no named subject: two fact words shared", before, after, attribute
        )
    if not shared and not share_a_name(before, after):
        return Verdict(Sameness.DIFFERENT, NO_SHARED_SUBJECT, before, after)
    return Verdict(Sameness.UNKNOWN, UNCLEAR_ENTITY, before, after)


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


def objection(
    old: MemoryEntry,
    new_content: str,
    new_category: str | None,
    *,
    old_reading: Reading | None = None,
    new_reading: Reading | None = None,
) -> str | None:
    """Why `new_content` may not replace `old`: only when it is positively about
    another subject (None: the same, or cannot tell — see `judge`)."""
    verdict = judge(
        old, new_content, new_category, old_reading=old_reading, new_reading=new_reading
    )
    return verdict.reason if verdict.sameness is Sameness.DIFFERENT else None


def likely_conflict(
    old: MemoryEntry,
    new_content: str,
    new_category: str | None,
    *,
    old_reading: Reading | None = None,
    new_reading: Reading | None = None,
    strict: bool = True,
) -> bool:
    """Whether a fact saved with no word on what it replaces probably changes `old`:
    about the same written (or, for a bare note like "Moved to Denver", the user's)
    entity, by a one-value vocabulary attribute, with another value. `strict`: the
    vocabulary alone decides (what a dream settles unasked); otherwise a reading may
    name the attribute the vocabulary could not."""
    verdict = judge(
        old,
        new_content,
        new_category,
        old_reading=None if strict else old_reading,
        new_reading=None if strict else new_reading,
    )
    before, after = verdict.old, verdict.new
    attribute = by_name(verdict.attribute) if verdict.attribute is not None else None
    return (
        verdict.allowed
        and (verdict.by_rules or not strict)
        and before is not None
        and after is not None
        and before.entity is not None
        and after.entity is not None
        and attribute is not None
        and attribute.single
        and other_value(before, after)
    )


def _asked_attribute(question: Subject, words: set[str]) -> str | None:
    """The one-value vocabulary attribute a question asks about: the one the subject check
    reads in it, or else the only one whose words it uses ("Where does Ana live?" reads
    as "~live", and only the home's words hold "live"; "Where does Ana work?" is
    employer's, manager's and role's words at once, so it names none)."""
    if question.known:
        asked = by_name(question.attribute or "")
        return asked.name if asked is not None and asked.single else None
    named = {a.name for a in ATTRIBUTES if a.single and words & attribute_words(a.name)}
    return named.pop() if len(named) == 1 else None


def _one_entity_asked(question: Subject, entity: Entity) -> bool:
    """Whether the question names `entity` and no one else. A name in it may be shorter
    than the entity's ("Maya" for Maya Lund), never longer: two names run together ("Is
    Amir Ruiz Li Berg's manager?") read as one that holds Li Berg's."""

    def within(words: tuple[str, ...]) -> bool:
        return bool(words) and set(words) <= set(entity.words)

    if question.entity is not None and not question.entity.same_as(entity):
        return False
    if entity.kind == "name":
        return bool(question.names) and all(within(n) for n in question.names)
    return question.entity is not None and not question.names


def newer_answers(question: str, older: str, newer: str) -> bool:
    """Whether recall may rank `newer` above `older`, a possible change linked to it that
    the subject check could not confirm, for `question`. Only when the question asks one
    entity (named alone) and one one-value attribute, as the vocabulary reads it, and
    either the newer fact is about exactly that and the older not about another entity
    or an unrelated attribute, or the older is exactly that and the newer, the same
    entity's, gives a value and nothing else: no attribute, not even a predicate word of
    its own ("Hugo now gets around in a Kia Niro", not "Hugo spent a holiday in Lyon",
    whose "spent" may be what it is about; `_unnamed_change`). A wrong link (an agent
    naming the wrong entry) joins facts of two subjects; for the question of either, the
    newer one then names another attribute, a predicate of its own or another kind of
    value, so it stays where its words rank it. What is left: a wrong link to a fact
    that gives only a value of the same kind ("Hugo is with Vexa now" beside "Hugo lives
    in Porto") ranks first for the older one's question, with both lines dated."""
    asked, new, old = subject_of(question), subject_of(newer), subject_of(older)
    words = _words(question)
    attribute = _asked_attribute(asked, words)
    if attribute is None or new.entity is None or not _one_entity_asked(asked, new.entity):
        return False
    if old.entity is not None and not old.entity.same_as(new.entity):
        return False
    if new.attribute is None:
        return old.known_attribute == attribute and _unnamed_change(old, new, newer, attribute)
    if new.known_attribute != attribute:
        return False
    return old.known_attribute is None or related(old.known_attribute, attribute)


def _words(text: str) -> set[str]:
    words = {w.strip("?.,!;:'\"()").lower() for w in text.split()}
    return words | {w.removesuffix("'s") for w in words}


def _unnamed_change(old: Subject, new: Subject, newer: str, attribute: str) -> bool:
    """Whether a newer fact that names no attribute ("Hugo now gets around in a Kia
    Niro") may be the change of the older one's `attribute`: it uses no word of another
    one-value attribute ("got", "moved": an employer's, a home's) and gives a value of
    the same kind as the older's — names beside names, numbers beside numbers (a car
    never ranks above a birthday on the 14th)."""
    words = _words(newer)
    if any(
        a.single and a.name != attribute and words & attribute_words(a.name) for a in ATTRIBUTES
    ):
        return False
    if not old.specifics or not new.specifics:
        return False

    def numeric(subject: Subject) -> bool:
        return any(ch.isdigit() for w in subject.specifics for ch in w)

    return numeric(old) == numeric(new)
