"""bench/recall.py reads LoCoMo's evidence turn ids however an item writes them: one
id, several in one item (`;`, `,` or spaces between them), a stray colon, or none."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "recall.py"


def _recall():
    spec = importlib.util.spec_from_file_location("bench_recall", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defined
    spec.loader.exec_module(module)
    return module


recall = _recall()


@pytest.mark.parametrize(
    ("refs", "ids"),
    [
        (["D8:6"], ["D8:6"]),
        ([" D8:6 "], ["D8:6"]),
        (["D8:6; D9:17"], ["D8:6", "D9:17"]),
        (["D9:1 D4:4 D4:6"], ["D9:1", "D4:4", "D4:6"]),
        (["D4:17, D4:19"], ["D4:17", "D4:19"]),
        (["D:11:26"], ["D11:26"]),
        (["D"], []),
        (["", "D2:3"], ["D2:3"]),
    ],
)
def test_every_turn_id_an_evidence_item_names_is_read(refs, ids):
    assert recall.turn_ids(refs) == ids


ids = st.tuples(st.integers(1, 40), st.integers(1, 60)).map(lambda p: f"D{p[0]}:{p[1]}")


@given(
    st.lists(st.lists(ids, min_size=1, max_size=4), min_size=1, max_size=4),
    st.sampled_from(["; ", ";", ", ", " ", "  "]),
)
def test_ids_joined_in_one_item_read_as_the_same_ids_listed_apart(groups, separator):
    joined = [separator.join(group) for group in groups]
    flat = [i for group in groups for i in group]
    assert recall.turn_ids(joined) == recall.turn_ids(flat) == flat


@given(st.lists(st.text(max_size=30), max_size=5))
def test_any_text_gives_well_formed_ids_or_none(refs):
    for found in recall.turn_ids(refs):
        session, turn = found.removeprefix("D").split(":")
        assert session.isdigit() and turn.isdigit()


def test_a_question_whose_evidence_item_holds_two_ids_is_scored(tmp_path):
    """The question the old parser dropped: its only evidence item names two turns."""
    conversation = {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."}],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "Her cat is called Miso."}],
        "session_2_date_time": "2:10 pm on 9 June, 2023",
    }
    sample = {
        "sample_id": "s1",
        "conversation": conversation,
        "observation": {},
        "qa": [
            {"question": "What is Ann's cat called?", "category": 1, "evidence": ["D1:1; D2:1"]}
        ],
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    [question] = recall.load(path, "turn")
    assert len(question.evidence) == 2
