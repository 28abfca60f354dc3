"""An LLM's supersede proposals, however garbled, never cost the rest of its reply: a
malformed pair or id is dropped, a well-formed one kept for the host to check."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from dreamkeeper.activities.dream_prompts import parse_consolidation
from dreamkeeper.activities.llm import parse_enrichment

GOOD = {"id": "a00000000001", "by": "a00000000002"}
junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=80, deadline=None)
@given(junk=junk)
def test_garbled_supersede_pairs_are_dropped_and_the_merges_kept(junk):
    reply = {
        "toDelete": ["a00000000003"],
        "toSave": [],
        "superseded": [junk, GOOD] if not isinstance(junk, list) else [*junk, GOOD],
    }
    parsed = parse_consolidation(json.dumps(reply))
    assert parsed.to_delete == ["a00000000003"]
    assert ("a00000000001", "a00000000002") in [(p.id, p.by) for p in parsed.superseded]


@settings(max_examples=80, deadline=None)
@given(junk=junk)
def test_garbled_replaces_in_an_enrichment_reply_keep_the_fact(junk):
    fact = {"content": "Maya Lund lives in Porto.", "replaces": junk}
    parsed = parse_enrichment(json.dumps([fact]))
    assert [f.content for f in parsed.facts] == ["Maya Lund lives in Porto."]
    assert all(len(i) == 12 for i in parsed.facts[0].replaces)


@settings(max_examples=120, deadline=None)
@given(junk=junk | st.text(max_size=80) | st.datetimes().map(lambda d: d.isoformat()))
def test_a_garbled_valid_from_in_an_enrichment_reply_keeps_the_fact_and_is_checked(junk):
    from datetime import UTC, datetime, timedelta

    from dreamkeeper.activities.save import LLM_VALID_FROM_MAX_AHEAD, proposed_valid_from

    fact = {"content": "The user moved to Denver.", "validFrom": junk}
    parsed = parse_enrichment(json.dumps([fact], default=str))
    assert [f.content for f in parsed.facts] == ["The user moved to Denver."]
    proposal = parsed.facts[0].valid_from
    assert proposal is None or (isinstance(proposal, str) and len(proposal) <= 64)
    saved_at = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    moment = proposed_valid_from(proposal, saved_at) if proposal is not None else None
    assert moment is None or (
        moment.tzinfo is not None and moment <= saved_at + LLM_VALID_FROM_MAX_AHEAD
    )
    assert moment is None or moment >= saved_at - timedelta(days=365 * 200)
