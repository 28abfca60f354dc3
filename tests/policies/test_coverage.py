"""The coverage check, with the reference's regression cases."""

from __future__ import annotations

import json

import pytest

from dreamkeeper.policies.coverage import Source, Vocabulary, find_missing_specifics
from dreamkeeper.stores.files.agent_files import AgentFiles
from dreamkeeper.stores.files.documents import FileDocuments
from dreamkeeper.stores.search.vocabulary import FILE_NAME, load_vocabulary

IDENTITY = (
    "Rocky Lhotka's accounts: GitHub rockfordlhotka, Bluesky rocky.bsky. "
    "Rocky Lhotka also appears in travel and calendar data as Rockford Duane Lhotka."
)


def test_the_merge_that_dropped_rockford_duane_is_rejected():
    merged = "Rocky Lhotka's accounts: GitHub rockfordlhotka, Bluesky rocky.bsky."
    assert find_missing_specifics([IDENTITY], merged) == ["Duane", "Rockford"]


def test_a_name_inside_a_longer_word_does_not_cover_it():
    assert find_missing_specifics(["Latency 250 ms"], "Latency 2500 ms") == ["250"]


def test_a_merge_keeping_every_specific_passes_self_coverage():
    assert find_missing_specifics([IDENTITY], IDENTITY) == []


@pytest.mark.parametrize(
    "text",
    [
        "Project Meridian27 budget is 121000 dollars.",
        "Enable 2FA on the B2B portal",
        "Deploy gpt4o-mini to eu-west-1 before Falcon9 ships",
    ],
)
def test_text_with_letter_digit_identifiers_covers_itself(text):
    # Digits inside an identifier used to be a "27" that no whole-word match could find.
    assert find_missing_specifics([text], text) == []


def test_letter_digit_identifiers_are_required_whole():
    source = "Project Meridian27 needs 2FA and gpt4o"
    merged = "Project Meridian (27) needs FA and gpt4"
    assert find_missing_specifics([source], merged) == ["2FA", "Meridian27", "gpt4o"]


def test_a_single_digit_ordinal_may_be_spelled_out():
    assert find_missing_specifics(["Office on the 3rd floor"], "Office on the third floor") == []


def test_possessive_is_covered_by_the_bare_name():
    assert find_missing_specifics(["Rocky's favourite band is Rush"], "Rocky likes Rush") == []


def test_single_digits_may_be_spelled_out_but_multi_digit_numbers_are_required():
    assert find_missing_specifics(["Keep the top 3 results"], "Keep the top three results") == []
    assert find_missing_specifics(["Class at 12:30 for 45 minutes"], "Class at noon") == [
        "12:30",
        "45",
    ]


def test_specifics_from_every_source_are_required():
    sources = ["Weekly sync with Trish", "Trish Roberts runs PWOP Productions"]
    assert find_missing_specifics(sources, "Weekly sync with Trish") == [
        "PWOP",
        "Productions",
        "Roberts",
    ]
    assert (
        find_missing_specifics(sources, "Weekly sync with Trish Roberts of PWOP Productions") == []
    )


def test_a_sentence_initial_common_word_is_ignored_but_kept_mid_sentence():
    assert find_missing_specifics(["Adding tests helps. The build is green."], "builds pass") == []
    assert find_missing_specifics(["We use Adding as a product name"], "We use it") == ["Adding"]


def test_sentence_initial_positions():
    # Start of a line, after a bullet, after an opening quote: all sentence-initial.
    text = 'note:\n- Validated by CI\n"Candidate list" done; First pass ok'
    assert find_missing_specifics([text], "note") == ["CI"]


def test_lowercase_twin_makes_a_capitalized_word_ordinary():
    assert find_missing_specifics(["Personal notes", "personal reminders"], "reminders") == []


def test_acronyms_count_in_any_position():
    assert find_missing_specifics(["IMAP settings for the LLC"], "mail settings") == ["IMAP", "LLC"]


def test_always_specific_words_rescue_character_names():
    story = "May met Will and Rose at the fair."
    # Sentence-initial "May" is a common word; "Will" mid-sentence is already kept.
    assert find_missing_specifics([story], "They met at the fair.") == ["Rose", "Will"]
    vocab = Vocabulary.build(always_specific=["May", "Will", "Rose"])
    assert find_missing_specifics([story], "They met at the fair.", vocab) == [
        "May",
        "Rose",
        "Will",
    ]


def test_iso_and_long_dates_are_equivalent():
    assert find_missing_specifics(["Flight on 2026-08-19"], "Flight on August 19, 2026") == []
    assert find_missing_specifics(["Flight on August 19, 2026"], "Flight on 2026-08-19") == []
    assert find_missing_specifics(["Flight on 2026-08-19"], "Flight in August") == ["2026-08-19"]


def test_abbreviations_do_not_open_a_sentence():
    assert find_missing_specifics(["Lives in St. Paul near Dr. May"], "Lives nearby") == [
        "May",
        "Paul",
    ]


def test_emails_urls_handles_and_phones_are_specifics():
    source = (
        "Allen: Allen.Conway@xebia.com, atconway@bellsouth.net, +1 386-299-4605, "
        "@atconway, https://example.org/talks."
    )
    assert find_missing_specifics([source], source) == []
    merged = "Allen: allen.conway@xebia.com, +1 (386) 299-4605"
    assert find_missing_specifics([source], merged) == [
        "@atconway",
        "atconway@bellsouth.net",
        "https://example.org/talks",
    ]


def test_numeric_exempt_categories_skip_numbers_only():
    vocab = Vocabulary.build(numeric_exempt_categories=["metrics"])
    src = Source("Latency 250 ms on Azure", category="metrics/latency")
    assert find_missing_specifics([src], "Latency on Azure", vocab) == []
    assert find_missing_specifics([src], "Latency fine", vocab) == ["Azure"]
    assert find_missing_specifics([Source("Latency 250 ms", "other")], "Latency", vocab) == ["250"]


def _documents(tmp_path):
    """The documents of agent a1 in the data directory `tmp_path` (and its folder)."""
    (tmp_path / "agents" / "a1").mkdir(parents=True, exist_ok=True)
    return FileDocuments(AgentFiles(tmp_path, "a1")), tmp_path / "agents" / "a1"


def test_vocabulary_file_is_read(tmp_path):
    documents, root = _documents(tmp_path)
    (root / FILE_NAME).write_text(
        json.dumps({"extraCommonWords": ["briefing"], "alwaysSpecificWords": ["May"]})
    )
    loaded = load_vocabulary(documents)
    assert loaded.warning is None and loaded.source.endswith(FILE_NAME)
    assert find_missing_specifics(["Briefing. May said hi"], "hi", loaded.vocabulary) == ["May"]
    assert "1 reclaimed as specifics" in loaded.summary


def test_missing_vocabulary_file_is_the_baseline(tmp_path):
    loaded = load_vocabulary(_documents(tmp_path)[0])
    assert loaded.source == "built-in baseline" and loaded.warning is None


@pytest.mark.parametrize(
    "content", ["{ nope", "[]", '{"alwaysSpecificWords": "May"}', '{"typo": []}']
)
def test_malformed_vocabulary_falls_back_to_the_baseline_with_a_warning(tmp_path, content):
    documents, root = _documents(tmp_path)
    (root / FILE_NAME).write_text(content)
    loaded = load_vocabulary(documents)
    assert loaded.source == "built-in baseline" and loaded.warning
    assert "coverage checking stays on" in loaded.warning
    # Still checking: a dropped name is still caught.
    assert find_missing_specifics(["Trish Roberts"], "Trish", loaded.vocabulary) == ["Roberts"]
