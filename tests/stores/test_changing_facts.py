"""Facts that change for real agents, on both backends: an agent's `replaces` checked by
subject, changes nobody explained kept as dated conflicts (newer first), and saves that
carry their own dates (`valid_from`, per-item `created_at` in bulk)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.core.errors import InvalidInput, ReplaceRefused
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.longterm.conflicts import (
    CONFLICTS_WITH,
    NEWER_VERSIONS,
    linked,
    note_conflicts,
    open_conflicts,
    prepare_readings,
)
from dreamkeeper.stores.longterm.dedup_save import dedup_existing
from dreamkeeper.stores.longterm.records import MAY_BE_REPLACED_BY, MAY_REPLACE, with_link
from dreamkeeper.stores.longterm.supersede import (
    ReplaceCheck,
    apply_replaces,
    check_replaceable,
    history,
)
from dreamkeeper.stores.search.query import conflict_note, format_hit, search


def _journal_reasons(store, entry_id: str) -> list[str]:
    return [r.reason or "" for r in store.changes() if r.id == entry_id]


# -- an agent's replaces ------------------------------------------------------------------


def test_a_replaces_about_another_subject_is_refused_and_force_journals_it(long_term, clock):
    store = long_term.open()
    cats = store.create("Mei is allergic to cats.", category="people")
    job = store.create("Mei works at Vexa.", category="people")
    with store.writing():
        with pytest.raises(ReplaceRefused, match="another attribute") as refused:
            check_replaceable(
                store, [cats.id], "0123456789ab", content="Mei started a new job.", category=None
            )
        assert cats.id in str(refused.value) and "force_replace" in str(refused.value)
        # The same entity and attribute: allowed, nothing to force.
        assert check_replaceable(
            store, [job.id], "0123456789ab", content="Mei joined Tessel."
        ) == ReplaceCheck({}, {})
        checked = check_replaceable(
            store, [cats.id], "0123456789ab", content="Mei started a new job.", force=True
        )
    assert checked.forced == {cats.id: "another attribute (employer, not allergy)"}
    assert store.require(cats.id).is_current  # a check writes nothing
    new = store.create("Mei started a new job.", category="people", entry_id="0123456789ab")
    assert apply_replaces(store, new.id, [cats.id], checked=checked) == [cats.id]
    assert store.require(cats.id).superseded_by == new.id
    assert any("forced over the subject check" in r for r in _journal_reasons(store, cats.id))


# -- changes nobody explained -------------------------------------------------------------


def _save_unexplained(store, text: str, category: str | None = "people"):
    """What the save path does with no LLM and no `replaces`: create, then dedup."""
    entry = store.create(text, category=category)
    return entry, dedup_existing(store, entry.id)


def test_a_change_nobody_explained_is_a_dated_conflict_shown_newer_first(long_term, clock):
    store = long_term.open()
    old = store.create("Maya Lund lives in Lisbon.", category="people")
    phone = store.create("Maya Lund's phone number is +1 291-347-7545.", category="people")
    clock.advance(days=90)
    new, saved = _save_unexplained(store, "Porto is where Maya Lund lives now.")
    assert saved.conflicts == (old.id,)
    # Linked both ways; both still current: nothing was superseded by a guess.
    assert linked(store.require(old.id), NEWER_VERSIONS) == [new.id]
    assert linked(store.require(new.id), CONFLICTS_WITH) == [old.id]
    assert store.require(old.id).is_current and store.require(new.id).is_current
    assert phone.id not in saved.conflicts
    # Default recall: the pair together, newer first, each line dated.
    hits = [h.entry.id for h in search(store, "Where does Maya Lund live? Lisbon")]
    assert hits.index(new.id) + 1 == hits.index(old.id)
    now = store.now()
    older_line = format_hit(
        store.require(old.id), now, conflict=conflict_note(store, store.require(old.id))
    )
    newer_line = format_hit(
        store.require(new.id), now, conflict=conflict_note(store, store.require(new.id))
    )
    assert f"newer: [{new.id}], {new.created_at:%Y-%m-%d}" in older_line
    assert f"older: [{old.id}], {old.created_at:%Y-%m-%d}" in newer_line
    assert f"current since {new.created_at:%Y-%m-%d}" in newer_line
    # A query only the old version matches brings the newer one in, first.
    only_old = [h.entry.id for h in search(store, "Lisbon")]
    assert only_old[:2] == [new.id, old.id]
    # As of a day between the two, only the old one was true.
    between = search(store, "Maya Lund lives", as_of=old.created_at + timedelta(days=30))
    assert [h.entry.id for h in between][:1] == [old.id]
    assert new.id not in [h.entry.id for h in between]
    # Nothing is lost, and the dream's finder sees the open pair.
    assert [(p.older.id, p.newer.id) for p in open_conflicts(store)] == [(old.id, new.id)]
    assert history(store, new.id) == [store.require(new.id)]


def test_a_retried_detection_links_once(long_term, clock):
    store = long_term.open()
    old = store.create("The user works at Initech.", category="people")
    clock.advance(days=30)
    new = store.create("User just joined Cyberdyne Labs.", category="people")
    assert note_conflicts(store, new.id) == [old.id]
    revisions = (store.require(old.id).revision, store.require(new.id).revision)
    assert note_conflicts(store, new.id) == [old.id]
    assert (store.require(old.id).revision, store.require(new.id).revision) == revisions


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Mei is allergic to cats.", "Mei started a new job."),  # another attribute
        ("Tom Berg lives in Lisbon.", "Tom Berg's sister moved to Porto."),  # another person
        ("Maya Lund lives in Lisbon.", "Maya Lund lives in Lisbon, near the river."),  # detail
        ("The user prefers tea.", "The user prefers coffee in the morning."),  # several values
        ("Omar works at Vexa.", "Omar joined the book club."),  # not an employer
    ],
)
def test_no_conflict_is_linked_where_both_may_be_true(long_term, clock, old, new):
    store = long_term.open()
    first = store.create(old, category="people")
    clock.advance(days=10)
    second, saved = _save_unexplained(store, new)
    assert saved.conflicts == ()
    assert CONFLICTS_WITH not in store.require(second.id).metadata
    assert NEWER_VERSIONS not in store.require(first.id).metadata


def test_a_backfilled_save_is_the_older_side_of_its_conflict(long_term, clock):
    store = long_term.open()
    current = store.create("Ana Ruiz's manager is Tom Berg.", category="people")
    clock.advance(days=1)
    # Saved later, but true since long before: the entry already here is the newer.
    earlier = store.create(
        "Ana Ruiz reports to Li Wei.",
        category="people",
        valid_from=current.created_at - timedelta(days=200),
    )
    assert note_conflicts(store, earlier.id) == [current.id]
    assert linked(store.require(earlier.id), NEWER_VERSIONS) == [current.id]
    assert [h.entry.id for h in search(store, "Who is Ana Ruiz's manager?")][:2] == [
        current.id,
        earlier.id,
    ]


# -- saves that carry their own dates ------------------------------------------------------


def test_valid_from_is_when_the_fact_became_true_and_as_of_reads_use_it(long_term, clock):
    store = long_term.open()
    moved = clock.now - timedelta(days=7)
    entry = store.create("The user moved to Denver.", valid_from=moved.date().isoformat())
    assert entry.valid_from == datetime.combine(moved.date(), datetime.min.time(), UTC)
    assert [h.entry.id for h in search(store, "Denver", as_of=clock.now - timedelta(days=3))] == [
        entry.id
    ]
    assert search(store, "Denver", as_of=clock.now - timedelta(days=8)) == []
    with pytest.raises(InvalidInput, match="in the future"):
        store.create("The rent doubles.", valid_from=clock.now + timedelta(days=400))
    with pytest.raises(InvalidInput, match="ISO 8601"):
        store.create("The rent doubles.", valid_from="next Tuesday")
    assert [e.content for e in store.entries()] == ["The user moved to Denver."]


def test_ten_thousand_dated_items_in_one_bulk_call(long_term, clock):
    store = long_term.open()
    start = clock.now - timedelta(days=3_650)
    items = [
        NewEntry(
            f"Journal entry {i}: the user noted item {i * 7}.",
            category="journal",
            created_at=(start + timedelta(hours=8 * i)).isoformat(),
            valid_from=start + timedelta(hours=8 * i - 24),
        )
        for i in range(10_000)
    ]
    made = store.create_many(items)
    assert len(made) == 10_000
    reopened = long_term.open()
    by_content = {e.content: e for e in reopened.entries()}
    for i in (0, 1, 4_999, 9_999):
        entry = by_content[f"Journal entry {i}: the user noted item {i * 7}."]
        assert entry.created_at == start + timedelta(hours=8 * i)
        assert entry.last_seen_at == entry.created_at
        assert entry.valid_from == start + timedelta(hours=8 * i - 24)
    # Dated recall: as of a day in the middle, only what was true by then.
    middle = start + timedelta(hours=8 * 5_000)
    found = search(reopened, "journal entry user noted", as_of=middle, limit=1_000)
    assert found and all(h.entry.valid_since <= middle for h in found)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("created_at", "2031-01-01", "in the future"),
        ("created_at", "yesterday", "ISO 8601"),
        ("valid_from", "2099-01-01T00:00:00Z", "in the future"),
        ("valid_from", "1600-01-01", "before 1900"),
    ],
)
def test_one_bad_date_refuses_the_whole_bulk_call(long_term, clock, field, value, message):
    store = long_term.open()
    items = [NewEntry(f"Note {i}", created_at="2020-01-01") for i in range(5)]
    items.append(NewEntry("Note with a bad date", **{field: value}))
    with pytest.raises(InvalidInput, match=message):
        store.create_many(items)
    assert store.entries() == []


def test_an_import_with_a_date_in_the_future_changes_nothing(long_term, clock):
    store = long_term.open()
    good = MemoryEntry(
        id="a00000000001", content="Old note", created_at=datetime(2019, 5, 1, tzinfo=UTC),
        last_seen_at=datetime(2019, 5, 1, tzinfo=UTC),
    )  # fmt: skip
    later = clock.now + timedelta(days=2)
    bad = good.model_copy(
        update={"id": "a00000000002", "content": "From the future", "created_at": later}
    )
    with pytest.raises(InvalidInput, match="a00000000002: created_at .* in the future"):
        store.import_entries([good, bad])
    assert store.entries() == []
    assert store.import_entries([good]).created == [good.id]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=st.one_of(st.text(max_size=40), st.datetimes(timezones=st.just(UTC))))
def test_any_valid_from_is_stored_as_given_or_refused_and_nothing_changes(any_store, value):
    before = len(any_store.entries())
    try:
        entry = any_store.create(f"Fact {before}: the user has a plan.", valid_from=value)
    except InvalidInput:
        assert len(any_store.entries()) == before
        return
    assert entry.valid_from is None or entry.valid_from.tzinfo is not None
    assert entry.valid_from is None or entry.valid_from <= any_store.now() + timedelta(days=366)


def test_a_journaled_link_says_why(long_term, clock):
    store = long_term.open()
    old = store.create("Kenji Sato drives a Volvo V60.", category="people")
    clock.advance(days=5)
    new, saved = _save_unexplained(store, "A Kia Niro is what Kenji Sato drives these days.")
    assert saved.conflicts == (old.id,)
    records = [r for r in store.changes() if r.id == old.id]
    assert records[-1].action is JournalAction.UPDATED
    assert f"likely changed by {new.id}" in (records[-1].reason or "")


def _history_file(count: int, start: datetime) -> list[str]:
    from dreamkeeper.stores.longterm.transfer import FORMAT, FORMAT_VERSION

    header = json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "agent": "notes"})
    lines = [header]
    for i in range(count):
        written = start + timedelta(hours=6 * i)
        lines.append(
            json.dumps(
                {
                    "entry": {
                        "content": f"Diary {i}: met a friend at cafe number {i}.",
                        "category": "diary",
                        "createdAt": written.isoformat(),
                        "validFrom": (written - timedelta(days=1)).date().isoformat(),
                    }
                }
            )
        )
    return lines


def test_a_history_of_ten_thousand_dated_notes_imports_in_one_call(long_term, clock):
    from dreamkeeper.stores.longterm.transfer import apply_import, read_export

    store = long_term.open()
    start = clock.now - timedelta(days=2_600)
    lines = _history_file(10_000, start)
    plan = apply_import(store, read_export(lines))
    assert len(plan.create) == 10_000 and not plan.conflicts
    reopened = long_term.open()
    entries = {e.content: e for e in reopened.entries()}
    assert len(entries) == 10_000
    for i in (0, 3_333, 9_999):
        entry = entries[f"Diary {i}: met a friend at cafe number {i}."]
        assert entry.created_at == start + timedelta(hours=6 * i)
        assert entry.valid_from is not None
        assert entry.valid_from.date() == (entry.created_at - timedelta(days=1)).date()
    # The same file again: the same derived ids, nothing new.
    again = apply_import(long_term.open(), read_export(lines))
    assert again.create == [] and len(again.unchanged) == 10_000


def test_a_dated_note_from_the_future_is_refused_and_nothing_is_imported(long_term, clock):
    from dreamkeeper.stores.longterm.transfer import apply_import, plan_import, read_export

    store = long_term.open()
    lines = _history_file(3, clock.now - timedelta(days=10))
    lines.append(json.dumps({"entry": {"content": "Tomorrow's diary.", "createdAt": "2099-01-01"}}))
    parsed = read_export(lines)
    with pytest.raises(InvalidInput, match="in the future"):
        plan_import(store, parsed)
    with pytest.raises(InvalidInput, match="in the future"):
        apply_import(store, parsed)
    assert store.entries() == []
    with pytest.raises(InvalidInput, match="createdAt"):
        read_export([lines[0], json.dumps({"entry": {"content": "x", "createdAt": "soon"}})])


def test_created_before_composes_with_include_superseded_and_as_of(long_term, clock):
    from dreamkeeper.stores.longterm.supersede import supersede

    store = long_term.open()
    old = store.create("Maya Lund lives in Lisbon.", category="people")
    clock.advance(days=100)
    cutoff = clock.now
    clock.advance(days=100)
    new = store.create("Maya Lund moved to Porto.", category="people")
    assert supersede(store, old.id, new.id).applied
    query = "Maya Lund"
    # Saved by the cutoff, current now: nothing (the old one is history).
    assert search(store, query, created_before=cutoff) == []
    # Every version saved by the cutoff: the old one.
    found = search(store, query, created_before=cutoff, include_superseded=True)
    assert [h.entry.id for h in found] == [old.id]
    # What was true at the cutoff.
    assert [h.entry.id for h in search(store, query, as_of=cutoff)] == [old.id]
    assert [h.entry.id for h in search(store, query, created_after=cutoff)] == [new.id]


# -- what the vocabulary cannot tell ---------------------------------------------------------


class _ConceptEmbedder:
    """An in-process stand-in for the embedding model: words of one concept share a
    dimension, every other word adds a little to one picked by its letters — so "is
    renting in" reads as a home and "works at" as an employer, with no vocabulary."""

    CONCEPTS = (
        {"live", "lives", "living", "home", "renting", "flat", "city"},
        {"work", "works", "company", "employs", "employer", "job", "payroll"},
    )

    def __init__(self) -> None:
        from dreamkeeper.core.settings import EmbeddingSettings

        self.settings = EmbeddingSettings(model="concepts", local=True)
        self.calls = 0

    @property
    def model_key(self) -> bytes:
        return b"concepts"

    def embed(self, texts, *, timeout=None, retries=0):  # noqa: ANN001, ANN201
        import numpy as np

        self.calls += 1
        out = []
        for text in texts:
            vector = np.zeros(64, dtype=np.float32)
            for word in text.lower().replace("?", " ").replace(".", " ").split():
                hit = [i for i, c in enumerate(self.CONCEPTS) if word in c]
                if hit:
                    vector[hit[0]] += 1.0
                else:
                    vector[2 + sum(map(ord, word)) % 62] += 0.2
            out.append(vector)
        return out

    def embed_query(self, text):  # noqa: ANN001, ANN201
        return self.embed([text])[0]

    def close(self) -> None:
        pass


def test_a_replaces_the_check_cannot_tell_is_kept_linked_and_dated_not_refused(long_term, clock):
    store = long_term.open()
    old = store.create("Ana Costa lives in Lisbon.", category="people")
    clock.advance(days=40)
    text = "Ana Costa is renting in Ghent these days."
    with store.writing():
        # Not refused: the vocabulary names one side's attribute only, so it cannot tell.
        checked = check_replaceable(store, [old.id], "0123456789ab", content=text)
        assert checked == ReplaceCheck({}, {old.id: "cannot tell which attribute"})
        new = store.create(text, category="people", entry_id="0123456789ab")
        assert apply_replaces(store, new.id, [old.id], checked=checked) == []
    # Not applied either: both current, linked as a possible change.
    assert store.require(old.id).is_current and store.require(new.id).is_current
    assert linked(store.require(old.id), MAY_BE_REPLACED_BY) == [new.id]
    assert linked(store.require(new.id), MAY_REPLACE) == [old.id]
    # Recall dates both and says which may replace which, but does not reorder them:
    # "renting" may be what the newer one is about, not where Ana lives.
    note = conflict_note(store, store.require(old.id))
    assert note == f"may be replaced by: [{new.id}], {new.created_at:%Y-%m-%d}"
    hits = [h.entry.id for h in search(store, "Where does Ana Costa live? Lisbon")]
    assert hits.index(old.id) < hits.index(new.id)
    # Saved again under the same id (a retry): the same answer, one link.
    with store.writing():
        again = check_replaceable(store, [old.id], new.id, content=text)
        apply_replaces(store, new.id, [old.id], checked=again)
    assert linked(store.require(old.id), MAY_BE_REPLACED_BY) == [new.id]


def test_a_reading_settles_a_replaces_the_vocabulary_cannot_tell(long_term, clock):
    model = _ConceptEmbedder()
    store = long_term.open(embeddings=model)
    old = store.create("Ana Costa lives in Lisbon.", category="people")
    job = store.create("Ana Costa works at Vexa.", category="people")
    clock.advance(days=40)
    text = "Ana Costa is renting in Ghent these days."
    readings = prepare_readings(store, text, [old.id, job.id], conflicts=False)
    assert readings[text].attribute() == "home"
    calls = model.calls
    with store.writing():
        checked = check_replaceable(
            store, [old.id], "0123456789ab", content=text, readings=readings
        )
        assert checked == ReplaceCheck({}, {})  # the same subject, by its reading
        # Another attribute by the vocabulary stays refused, whatever the reading.
        with pytest.raises(ReplaceRefused, match="another attribute"):
            check_replaceable(
                store, [job.id], "0123456789ab", content="Ana Costa is allergic to cats."
            )
        new = store.create(text, category="people", entry_id="0123456789ab")
        assert apply_replaces(store, new.id, [old.id], checked=checked) == [old.id]
    assert model.calls == calls  # the locked step never asks the model
    assert store.require(old.id).superseded_by == new.id
    assert store.require(job.id).is_current


def test_a_change_nobody_explained_is_linked_when_a_reading_names_its_attribute(long_term, clock):
    store = long_term.open(embeddings=_ConceptEmbedder())
    old = store.create("Ana Costa lives in Lisbon.", category="people")
    job = store.create("Ana Costa works at Vexa.", category="people")
    clock.advance(days=40)
    new = store.create("Ana Costa is renting in Ghent these days.", category="people")
    # Without a reading, the vocabulary alone cannot tell: nothing is linked.
    assert note_conflicts(store, new.id) == []
    assert note_conflicts(store, new.id, prepare_readings(store, new.content)) == [old.id]
    assert linked(store.require(new.id), CONFLICTS_WITH) == [old.id]
    assert store.require(job.id).metadata.get(NEWER_VERSIONS) is None
    # A pair a reading linked is recall's (newer first), not the dream's to settle alone.
    assert open_conflicts(store) == []


def test_a_link_between_two_subjects_never_reorders_recall(long_term, clock):
    store = long_term.open()
    cats = store.create("Mei is allergic to cats.", category="people")
    clock.advance(days=40)
    home = store.create("Mei lives in Porto now.", category="people")
    # A link no check would make (an older version's, or one edited since): recall
    # re-checks it and keeps the durable fact where its own question ranks it.
    store.mutate(cats.id, lambda e: with_link(e, NEWER_VERSIONS, home.id))
    store.mutate(home.id, lambda e: with_link(e, CONFLICTS_WITH, cats.id))
    assert [h.entry.id for h in search(store, "What is Mei allergic to?")][0] == cats.id


def _possible_change(store, older, newer) -> None:
    """Link two entries as a save's `replaces` the check could not confirm leaves them."""
    store.mutate(older.id, lambda e: with_link(e, MAY_BE_REPLACED_BY, newer.id))
    store.mutate(newer.id, lambda e: with_link(e, MAY_REPLACE, older.id))


def test_recall_puts_the_newer_of_a_possible_change_first_only_for_its_own_question(
    long_term, clock
):
    store = long_term.open()
    old = store.create("Li Berg works for Amir Ruiz, Li Berg's manager.", category="people")
    clock.advance(days=60)
    new = store.create("Li Berg reports to Lea Silva.", category="people")
    _possible_change(store, old, new)
    asked = [h.entry.id for h in search(store, "Who is Li Berg's manager?")]
    assert asked[:2] == [new.id, old.id]  # the newer first, the older right after
    note = conflict_note(store, store.require(old.id))
    assert note == f"may be replaced by: [{new.id}], {new.created_at:%Y-%m-%d}"
    # A question that names someone else beside Li Berg is not the pair's own: its ranks
    # stay as the words give them.
    other = [h.entry.id for h in search(store, "Is Amir Ruiz Li Berg's manager?")]
    assert other.index(old.id) < other.index(new.id)


def test_a_wrong_possible_change_never_puts_anything_above_a_durable_fact(long_term, clock):
    store = long_term.open()
    durable = store.create("Mei Lund speaks Dutch at home.", category="people")
    clock.advance(days=60)
    # A careless agent named the durable fact in `replaces` of a move.
    wrong = store.create("Mei Lund has moved to a new home in Porto.", category="people")
    _possible_change(store, durable, wrong)
    for question in ("What language does Mei Lund speak at home?", "Mei Lund Dutch home"):
        assert search(store, question)[0].entry.id == durable.id
    # A durable fact of a one-value attribute, wrongly named by a save whose fact names
    # no attribute at all: its question still finds it first.
    birthday = store.create("Mei Lund's birthday is on 14 March.", category="people")
    clock.advance(days=60)
    car = store.create("Mei Lund now gets around in a Kia Niro.", category="people")
    _possible_change(store, birthday, car)
    assert search(store, "When is Mei Lund's birthday?")[0].entry.id == birthday.id


def test_recall_puts_a_change_that_names_no_attribute_first_for_the_older_ones_question(
    long_term, clock
):
    store = long_term.open()
    old = store.create("Hugo Sato's car is a Fiat Panda these days.", category="people")
    clock.advance(days=90)
    new = store.create("Hugo Sato now gets around in a Kia Niro.", category="people")
    _possible_change(store, old, new)
    assert [h.entry.id for h in search(store, "What car does Hugo Sato drive?")][:2] == [
        new.id,
        old.id,
    ]
