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
