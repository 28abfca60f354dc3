"""policies.subject and policies.supersede: a subject is an entity and an attribute,
whichever word comes first; the supersede and conflict decisions built on it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.subject import USER, subject_of
from dreamkeeper.policies.supersede import Sameness, judge, likely_conflict, objection

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _entry(content: str, category: str | None = None) -> MemoryEntry:
    return MemoryEntry(
        id="0123456789ab", content=content, category=category, created_at=NOW, last_seen_at=NOW
    )


# -- the examples ----------------------------------------------------------------


def test_a_new_lead_named_first_replaces_the_old_lead_of_the_project():
    verdict = judge(_entry("Priya leads Lumen."), "Yusuf took over as Lumen lead.", None)
    assert verdict.allowed, verdict.reason
    assert verdict.new is not None and verdict.new.entity is not None
    assert verdict.new.entity.words == ("lumen",) and verdict.new.attribute == "lead"
    assert likely_conflict(_entry("Priya leads Lumen."), "Yusuf took over as Lumen lead.", None)


def test_a_new_manager_named_first_replaces_the_users_old_manager():
    old = _entry("Anna is the user's manager.")
    verdict = judge(old, "Bjorn is now User's manager.", None)
    assert verdict.allowed, verdict.reason
    assert verdict.new is not None and verdict.new.entity == USER
    assert verdict.new.attribute == "manager"


def test_the_user_is_an_entity_not_a_skipped_word():
    found = subject_of("User just joined Cyberdyne Labs.")
    assert found.entity == USER and found.attribute == "employer"
    assert found.specifics == {"cyberdyne", "labs"}
    assert (
        objection(_entry("The user works at Initech."), "User just joined Cyberdyne Labs.", None)
        is None
    )


def test_another_attribute_of_the_same_person_is_never_a_supersede():
    verdict = judge(_entry("Mei is allergic to cats."), "Mei started a new job.", None)
    assert not verdict.allowed
    assert verdict.reason == "another attribute (employer, not allergy)"
    assert not likely_conflict(_entry("Mei is allergic to cats."), "Mei started a new job.", None)


def test_bare_notes_about_the_user_conflict_when_the_value_changes():
    assert likely_conflict(_entry("lives in Chicago"), "Moved to Denver", None)
    assert not likely_conflict(_entry("lives in Chicago"), "Lives in Chicago since 2019", None)


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("Maya Lund lives in Lisbon.", "Tom Berg's sister lives in Lisbon.", "another subject"),
        ("Tom lives in Lisbon.", "Tom's sister moved to Porto.", "another subject"),
        (
            "Sara Okafor's phone number is +1 291-347-7545.",
            "Sara Sato can be reached at +1 404-519-2406.",
            "another subject",
        ),  # fmt: skip
        (
            "Mei lives in Lisbon.",
            "Mei is allergic to cats.",
            "another attribute (allergy, not home)",
        ),  # fmt: skip
        (
            "Mei is allergic to cats.",
            "Mei is allergic to peanuts.",
            "another allergy (both may hold at once)",
        ),  # fmt: skip
        ("The user likes tea.", "The weather is cold.", "no shared subject"),
    ],
)
def test_refusals_say_why_without_quoting_the_text(old, new, reason):
    verdict = judge(_entry(old), new, None)
    assert not verdict.allowed
    assert verdict.reason == reason
    assert not likely_conflict(_entry(old), new, None)


def test_a_multi_valued_attribute_is_replaced_only_about_the_same_value():
    old = _entry("The user prefers short answers.")
    assert objection(old, "The user prefers detailed answers.", None) is None
    assert objection(old, "The user prefers tea.", None) is not None
    # Two preferences may hold at once: never a conflict by themselves.
    assert not likely_conflict(old, "The user prefers detailed answers.", None)


def test_categories_compare_by_their_top_level():
    old = _entry("Maya Lund lives in Lisbon.", "people/home")
    assert objection(old, "Maya Lund moved to Porto.", "people/maya") is None
    assert objection(old, "Maya Lund moved to Porto.", None) is None
    assert objection(old, "Maya Lund moved to Porto.", "work") == "another category"


# -- generated phrasings -------------------------------------------------------------------

PEOPLE = ["Maya Lund", "Tom Berg", "Ana Ruiz", "Li Wei", "Omar Haddad", "Kenji Sato"]
PROJECTS = ["Lumen", "Granite", "Atlas", "Kestrel"]
CITIES = ["Lisbon", "Porto", "Oslo", "Graz", "Tartu"]
COMPANIES = ["Vexa", "Norrland Labs", "Brightpath", "Kite Health"]
PHONES = ["+1 291-347-7545", "+1 404-519-2406", "+1 800-242-7454", "+44 20 7946 0018"]

# attribute -> (entity pool, value pool, phrasings: subject first, value first, another
# person first)
PHRASINGS: dict[str, tuple[list[str], list[str], list[str]]] = {
    "home": (
        PEOPLE,
        CITIES,
        [
            "{e} lives in {v}.",
            "{v} is where {e} lives now.",
            "{e} moved to {v} last week.",
            "{e}'s home is in {v} these days.",
            "Since March, {e} has been based in {v}.",
        ],
    ),
    "employer": (
        PEOPLE,
        COMPANIES,
        [
            "{e} works at {v}.",
            "{v} hired {e} last month; {e} joined {v} in May.",
            "{e} just joined {v}.",
            "{e}'s employer is {v}.",
        ],
    ),
    "manager": (
        PEOPLE,
        PEOPLE,
        [
            "{e}'s manager is {v}.",
            "{v} is now {e}'s manager.",
            "{e} reports to {v}.",
            "{v} manages {e}.",
        ],
    ),
    "lead": (
        PROJECTS,
        PEOPLE,
        [
            "{v} leads {e}.",
            "{v} took over as {e} lead.",
            "{e} is led by {v}.",
            "The {e} lead is {v}.",
            "{v} is the new lead of {e}.",
        ],
    ),
    "phone": (
        PEOPLE,
        PHONES,
        [
            "{e}'s phone number is {v}.",
            "{v} is {e}'s new phone number.",
            "{e} can be reached at {v}.",
        ],
    ),
}


@st.composite
def facts(draw, attribute=None):
    name = attribute or draw(st.sampled_from(sorted(PHRASINGS)))
    entities, values, templates = PHRASINGS[name]
    entity = draw(st.sampled_from(entities))
    value = draw(st.sampled_from([v for v in values if v != entity]))
    template = draw(st.sampled_from(templates))
    return name, entity, value, template.format(e=entity, v=value)


@settings(max_examples=400, deadline=None)
@given(fact=facts())
def test_every_phrasing_names_the_same_entity_and_attribute(fact):
    attribute, entity, value, text = fact
    found = subject_of(text)
    assert found.attribute == attribute, text
    assert found.entity is not None and found.entity.words == tuple(entity.lower().split()), text
    assert set(value.lower().replace("+", "").split()) & set(found.specifics) or any(
        ch.isdigit() for ch in value
    ), text


@settings(max_examples=600, deadline=None)
@given(old=facts(), new=facts())
def test_a_replacement_is_allowed_exactly_for_the_same_entity_and_attribute(old, new):
    same = old[0] == new[0] and old[1] == new[1]
    verdict = judge(_entry(old[3]), new[3], None)
    if old[3] == new[3] or (same and old[2] == new[2]):
        return  # a repeat, or the same value reworded: not what this is about
    assert verdict.allowed == same, (old[3], new[3], verdict.reason)
    assert likely_conflict(_entry(old[3]), new[3], None) == same, (old[3], new[3])


def _recase(text: str, entity: str, how: str) -> str:
    """Change the case of everything but the names."""
    words = []
    names = set(entity.split())
    for word in text.split():
        bare = word.strip(".,;:'s")
        if bare in names or bare[:1].isupper() and bare not in ("The", "Since"):
            words.append(word)
        else:
            words.append(word.upper() if how == "upper" else word.capitalize())
    return " ".join(words)


@settings(max_examples=200, deadline=None)
@given(fact=facts(), how=st.sampled_from(["upper", "title"]))
def test_the_case_of_the_other_words_changes_nothing(fact, how):
    attribute, entity, _, text = fact
    found = subject_of(_recase(text, entity, how))
    assert found.attribute == attribute, _recase(text, entity, how)
    assert found.entity is not None and found.entity.words == tuple(entity.lower().split())


@settings(max_examples=200, deadline=None)
@given(
    attribute=st.sampled_from(["home", "employer", "manager", "phone"]),
    form=st.sampled_from(["User", "The user", "the user", "USER"]),
    data=st.data(),
)
def test_the_user_however_written_is_one_entity(attribute, form, data):
    _, values, templates = PHRASINGS[attribute]
    template = data.draw(st.sampled_from(templates))
    text = template.format(e=form, v=data.draw(st.sampled_from(values)))
    text = text[0].upper() + text[1:]
    found = subject_of(text)
    assert found.entity == USER, text
    assert found.attribute == attribute, text


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300))
def test_any_text_gets_a_subject_or_none_and_never_raises(text):
    found = subject_of(text)
    assert found.attribute is None or isinstance(found.attribute, str)
    objection(_entry("Maya Lund lives in Lisbon."), text or "x", None)


@pytest.mark.parametrize(
    ("text", "entity", "attribute"),
    [
        ("Lisbon is home for the user now.", ("user",), "home"),
        ("Ivan Ruiz's new place is in Krakow.", ("ivan", "ruiz"), "home"),
        ("Brightpath hired Ana Sato in the spring.", ("ana", "sato"), "employer"),
        ("Raj Costa is in charge of Lumen now.", ("lumen",), "lead"),
        ("Started a new job at Orbital Foods.", ("user",), "employer"),
        ("12 people now report to Li Haddad.", ("li", "haddad"), "team size"),
        ("Call Zoe Okafor on +1 987-516-8085 from now on.", ("zoe", "okafor"), "phone"),
        ("These days Omar Okafor calls Turin home.", ("omar", "okafor"), "home"),
    ],
)
def test_owners_objects_bare_notes_counts_and_value_shapes(text, entity, attribute):
    found = subject_of(text)
    assert found.entity is not None and found.entity.words == entity, found
    assert found.attribute == attribute


def test_words_that_name_an_attribute_only_in_context_do_not_alone():
    assert subject_of("The meeting took place in Oslo.").attribute != "home"
    assert subject_of("Maya's team meets on Mondays.").attribute != "team size"
    assert subject_of("A number of people came.").attribute != "phone"
    assert subject_of("The launch is on 2026-03-02.").attribute != "phone"
    # A subject is written, just not a name: no note about the user.
    assert subject_of("Three people moved to Leeds.").entity != USER


def test_an_unknown_attribute_with_other_names_is_not_replaced_and_not_refused():
    old = _entry("Jon Haddad had lunch with Sara Silva in Tartu.")
    verdict = judge(old, "Jon Haddad had lunch with Omar Ferreira in Turin.", None)
    # Outside the vocabulary, another value may be a second one, not a change: the check
    # cannot tell, so it neither replaces nor refuses.
    assert verdict.sameness is Sameness.UNKNOWN
    assert verdict.reason == "another value of an attribute outside the vocabulary"
    assert objection(old, "Jon Haddad had lunch with Omar Ferreira in Turin.", None) is None
    old = _entry("The Lumen demo went well; Ivan Costa presented it.")
    assert not judge(old, "The Lumen demo went well; Ivan Klein presented it.", None).allowed
    # Names are what a fact is about: sharing them is no shared subject by itself.
    old = _entry("Call Eva Moreau on +1 229-621-6036 from now on.")
    assert objection(old, "Eva Moreau is allergic to shellfish.", None) is not None
    old = _entry("20 people now report to Ana Lund.")
    assert objection(old, "3 people now report to Omar Lund.", None) == "another subject"


def test_a_definite_thing_is_no_note_about_the_user():
    found = subject_of("The team under Sara Ruiz is 7 people.")
    assert found.entity != USER
    old = _entry("The team under Sara Ruiz is 7 people.")
    assert not likely_conflict(old, "The team under Ana Lund is 20 people.", None)
    assert subject_of("Started a new job at Orbital Foods.").entity == USER


# -- who the note is about when it does not open with them ---------------------------------


@pytest.mark.parametrize(
    ("text", "entity", "attribute"),
    [
        # "me" receives the number; the giver is whose it is ("my number" is the user's).
        ("Amir Novak gave me a new number: +1 657-311-9771.", ("amir", "novak"), "phone"),
        ("My number is +1 657-311-9771 now.", ("user",), "phone"),
        ("The user's number is +1 657-311-9771.", ("user",), "phone"),
        # A count "under" someone is their team.
        ("Headcount under Jon Sato is 15 now.", ("jon", "sato"), "team size"),
        ("The team under Sara Berg is 12 people.", ("sara", "berg"), "team size"),
        # An ordinary noun opening the note is not its subject.
        ("Decisions on Kestrel go through Lea Berg now, the new lead.", ("kestrel",), "lead"),
        ("Updates for Ivan Sato come from Tom Sato, the new manager.", ("ivan", "sato"), "manager"),
        # A contraction keeps its pronoun.
        ("I've relocated to Krakow.", ("user",), "home"),
        ("We're living in Ghent now.", ("user",), "home"),
        # A group reporting to someone is that one's team, not a manager's change.
        ("Staff reporting to Ivan Moreau: 40 people.", ("ivan", "moreau"), "team size"),
        ("Engineers reporting to Ana Berg: 12.", ("ana", "berg"), "team size"),
        # A particle inside a phrase ("moved out to") is still the phrase.
        ("Neighbours say Kenji Sato moved out to Lisbon.", ("kenji", "sato"), "home"),
        ("Maya Lund moved back to Porto.", ("maya", "lund"), "home"),
    ],
)
def test_the_subject_is_found_behind_an_opening_noun_an_object_or_a_contraction(
    text, entity, attribute
):
    found = subject_of(text)
    assert found.entity is not None and found.entity.words == entity, found
    assert found.attribute == attribute


def test_a_note_opened_by_its_noun_and_naming_two_others_is_nobody_s():
    # "Rent in Lyon is what Tom Lund pays": the user is not who pays it.
    found = subject_of("Rent in Lyon is what Tom Lund pays now.")
    assert found.entity != USER
    assert subject_of("Home: Porto.").entity == USER


_OPENERS = ["Decisions", "Updates", "Notes", "Budget", "Calls", "Mail", "Feedback", "Invoices"]
_PREPOSITIONS = ["on", "for", "about", "to", "from", "under"]
_PEOPLE = ["Ana Sato", "Omar Rossi", "Lea Berg", "Ivan Moreau", "Theo Klein"]


@settings(max_examples=300, deadline=None)
@given(
    opener=st.sampled_from(_OPENERS),
    preposition=st.sampled_from(_PREPOSITIONS),
    people=st.lists(st.sampled_from(_PEOPLE), min_size=2, max_size=2, unique=True),
    old_phone=st.integers(1_000_000, 9_999_999),
    new_phone=st.integers(1_000_000, 9_999_999),
)
def test_one_opening_word_never_makes_two_people_one_subject(
    opener, preposition, people, old_phone, new_phone
):
    """Notes worded alike about two people ("Calls to Ana ... ", "Calls to Omar ...")
    share their opening word: it is no name, so neither a replacement nor a conflict."""
    first, second = people
    old = f"{opener} {preposition} {first} should go to +1 {old_phone}."
    new = f"{opener} {preposition} {second} should go to +1 {new_phone}."
    before, after = subject_of(old).entity, subject_of(new).entity
    assert before is None or after is None or not before.same_as(after), (old, new)
    assert not judge(_entry(old), new, None).allowed, (old, new)
    assert not likely_conflict(_entry(old), new, None), (old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # An infinitive "to lead" puts the project after it, as "leads" does.
        ("Tom Costa stepped in to lead Lumen.", "Lumen is led by Omar Ruiz as of this quarter."),
        ("The Atlas project lead is now Omar Ruiz.", "Pablo Silva was asked to head Atlas."),
        # Having a home somewhere is living there.
        ("Tom Lund lives in Porto.", "Tom Lund has a flat in Lisbon now."),
        ("Tom Lund moved to Porto.", "Tom Lund bought a house in Graz."),
        # An offer accepted, a job landed, a place on the payroll: an employer.
        ("Eva Novak accepted an offer from Ambertide.", "Eva Novak landed at Corvid Systems."),
        ("Kenji Novak works at Vexa.", "Kenji Novak is on the payroll at Ambertide these days."),
        # Getting around in a car is driving it.
        ("Raj Rossi drives a Skoda Octavia.", "These days Raj Rossi commutes in a Kia Niro."),
    ],
)
def test_everyday_wordings_of_a_change_name_its_attribute(old, new):
    verdict = judge(_entry(old), new, None)
    assert verdict.allowed, verdict


def test_to_lead_is_the_verb_and_a_lead_stays_a_noun():
    assert subject_of("Mila Costa's lead is Omar Ruiz.").entity.words == ("mila", "costa")
    found = subject_of("Zoe Lund stepped in to lead Juniper.")
    assert found.entity.words == ("juniper",) and found.attribute == "lead"
    # Running a marathon is no project's lead.
    assert not judge(
        _entry("Tom Lund runs Atlas."), "Tom Lund wants to run a marathon.", None
    ).allowed


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # "at home" is where a fact happens, not a home: two people, two facts.
        ("At home Hugo Sato talks in Swahili.", "At home Li Wei talks in Swahili."),
        ("Hugo Sato works from home.", "Hugo Sato lives in Porto."),
        ("Tom Lund is in town this week.", "Tom Lund lives in Lisbon."),
    ],
)
def test_a_bare_noun_after_a_preposition_is_a_place_not_the_attribute(old, new):
    assert not judge(_entry(old), new, None).allowed
    assert subject_of(old).attribute != "home"
