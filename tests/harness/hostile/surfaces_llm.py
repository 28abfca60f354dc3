"""LLM replies, hostile by nature: enrichment, consolidation, merge repair and
preference inference, each parsed by the product's parser and then applied as the
workflow applies it."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from dreamkeeper.activities.dream_prompts import (
    parse_consolidation,
    parse_preferences,
    parse_repair,
)
from dreamkeeper.activities.llm import MAX_FACTS_PER_REPLY, MalformedLLMOutput, parse_enrichment
from dreamkeeper.activities.save import enrichment_result
from dreamkeeper.core.dream_payloads import ProposedMerge, ProposeResult
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.payloads import FactProposal
from dreamkeeper.policies.consolidation import prune_candidates, review_merge
from dreamkeeper.policies.dedup import Candidate
from dreamkeeper.policies.merge import MergeProposal, merge_category, merged_entry, valid_tags
from dreamkeeper.stores.dedup_save import save_fact
from dreamkeeper.stores.entry_files import entry_parts
from dreamkeeper.stores.journal import JournalAction
from tests.harness.hostile.sandbox import SEEDED, T0, Sandbox, Surface, Violation, mark_after
from tests.harness.hostile.strategies import (
    categories,
    entry_ids,
    garbage,
    hostile_text,
    json_values,
    jsonable,
    maybe,
    sane_category,
    sane_importance,
    sane_tags,
    sane_text,
    tags_lists,
)

# -- surfaces: LLM replies ----------------------------------------------------------------


def _reply_text(value: object, fence: str) -> str:
    text = jsonable(value)
    return f"```{fence}\n{text}\n```" if fence else text


_fact_fields = st.fixed_dictionaries(
    {
        "content": maybe(
            st.one_of(hostile_text, json_values),
            st.one_of(
                sane_text, st.just(SEEDED["aaaaaaaaaaa1"][0]), st.just(SEEDED["aaaaaaaaaaa2"][0])
            ),
        ),
        "category": maybe(st.one_of(categories, json_values), sane_category),
        "tags": maybe(st.one_of(tags_lists, json_values), sane_tags),
        "importance": maybe(
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), json_values), sane_importance
        ),
        "metadata": maybe(
            st.one_of(
                st.just({"subjectTime": "z" * 2_001}),
                st.just({"subjectTime": "2026-01-01"}),
                st.just({"subjectTime": 5}),
                json_values,
            ),
            None,
        ),
    }
)
_fences = st.sampled_from(["", "", "json", "JSON", "python"])


def llm_replies(item: st.SearchStrategy, wrap: Callable[[list], object]) -> st.SearchStrategy:
    items = st.one_of(
        st.lists(item, max_size=4),
        st.integers(21, 2_000).map(lambda n: [{"content": f"fact {i}"} for i in range(n)]),
        st.just(
            [{"content": SEEDED["aaaaaaaaaaa1"][0], "tags": [f"new{n}" for n in range(32)]}] * 5
        ),
    )
    well_formed = st.tuples(items.map(wrap), _fences).map(lambda v: _reply_text(*v))
    return st.one_of(
        *[well_formed.map(lambda x: x) for _ in range(6)],
        garbage.map(lambda g: g.decode("utf-8", "replace") if isinstance(g, bytes) else g),
        json_values.map(jsonable),
        st.integers(1, 40).map(lambda n: "[" + " " * (n * 25_000) + "]"),
        st.just("x" * 600_000),
        hostile_text,
    )


enrichment_replies = llm_replies(_fact_fields, lambda items: items)
ORIGINAL = "aaaaaaaaaaa2"


def run_enrichment(sandbox: Sandbox, text: str) -> bool:
    store = sandbox.store
    try:
        reply = parse_enrichment(text)
    except MalformedLLMOutput:
        return True
    mark_after(sandbox)
    if len(reply.facts) > MAX_FACTS_PER_REPLY:
        raise Violation(f"{len(reply.facts)} facts passed the cap")
    result = enrichment_result(reply, "notes", ORIGINAL)
    result.model_dump_json()  # it must travel as a Temporal payload
    saved: list[str] = []
    # Every fact the parser passes must save, as the workflow saves them (the store's
    # lock, dedup, one reinforcement per entry per save): never a save failing half-way.
    for index, fact in enumerate(result.facts):
        outcome = save_fact(
            store,
            Candidate(
                fact.content,
                fact.category,
                tuple(fact.tags),
                tuple(fact.metadata.items()),
                fact.importance,
            ),
            new_id=f"{index + 1:012x}",
            op_id=f"{ORIGINAL}-{index}",
            exclude=[ORIGINAL],
            touched=sorted(set(saved)),
        )
        saved.append(outcome.entry_id)
    into = sorted(set(saved) - {ORIGINAL})
    if into:
        store.retire_into(ORIGINAL, into, reason="fuzz enrichment")
    entry = store.get("aaaaaaaaaaa1")
    if entry is not None and entry.reinforcement_count > 2:
        raise Violation(f"one save reinforced an entry {entry.reinforcement_count - 1} times")
    return not result.facts


ENRICHMENT = Surface("LLM enrichment reply", enrichment_replies, run_enrichment)

_merge_fields = st.fixed_dictionaries(
    {
        "content": maybe(
            st.one_of(
                hostile_text,
                json_values,
                st.just(SEEDED["aaaaaaaaaaa1"][0] + " " + SEEDED["aaaaaaaaaaa2"][0] + "\x00"),
            ),
            sane_text.map(
                lambda t: SEEDED["aaaaaaaaaaa1"][0] + " " + SEEDED["aaaaaaaaaaa2"][0] + " " + t
            ),
        ),
        "category": maybe(st.one_of(categories, json_values), st.one_of(st.none(), sane_category)),
        "tags": maybe(st.one_of(tags_lists, json_values), sane_tags),
        "sourceIds": maybe(
            st.one_of(st.lists(entry_ids, max_size=20), json_values),
            ["aaaaaaaaaaa1", "aaaaaaaaaaa2"],
        ),
        "importance": maybe(
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), json_values), 0.7
        ),
    }
)
consolidation_replies = st.one_of(
    llm_replies(_merge_fields, lambda items: {"toSave": items, "toDelete": ["aaaaaaaaaaa2"]}),
    st.tuples(st.lists(entry_ids, max_size=600), _fences).map(
        lambda v: _reply_text({"toDelete": v[0], "toSave": []}, v[1])
    ),
)


def run_consolidation(sandbox: Sandbox, text: str) -> bool:
    store = sandbox.store
    try:
        reply = parse_consolidation(text)
    except MalformedLLMOutput:
        return True
    mark_after(sandbox)
    shown = {e.id: e.fingerprint for e in store.entries()}
    ProposeResult(
        shown=shown,
        to_delete=reply.to_delete,
        to_save=[
            ProposedMerge(
                content=m.content,
                category=m.category,
                tags=m.tags,
                source_ids=m.source_ids,
                importance=m.importance,
            )
            for m in reply.to_save
        ],
    ).model_dump_json()  # it must travel as a Temporal payload
    applied = 0
    for merge in reply.to_save:
        review = review_merge(
            merge.content,
            merge.source_ids,
            {i: store.get(i) if _is_id(i) else None for i in merge.source_ids},
            shown,
        )
        if review.accepted:
            sources = [store.require(i) for i in dict.fromkeys(merge.source_ids)]
            proposal = MergeProposal(
                merge.content,
                merge_category(merge.category, sources),
                tuple(valid_tags(merge.tags)),
                merge.importance,
            )
            merged = merged_entry(f"{applied + 1:012x}", proposal, sources, T0)
            store.put(merged, action=JournalAction.MERGED)
            applied += 1
    prune_candidates(
        reply.to_delete,
        shown=shown,
        merge_only=[],
        merge_sources=[s for m in reply.to_save for s in m.source_ids],
    )
    return applied == 0 and not reply.to_delete


def _is_id(value: str) -> bool:
    try:
        entry_parts(value, None)
    except InvalidInput:
        return False
    return True


CONSOLIDATION = Surface("LLM consolidation reply", consolidation_replies, run_consolidation)

repair_replies = st.one_of(
    *[
        st.tuples(
            st.fixed_dictionaries(
                {
                    "content": maybe(
                        st.one_of(hostile_text, json_values),
                        sane_text.map(lambda t: SEEDED["aaaaaaaaaaa1"][0] + " " + t),
                    )
                }
            ),
            _fences,
        ).map(lambda v: _reply_text(*v))
        for _ in range(6)
    ],
    llm_replies(json_values, lambda items: items),
)


def run_repair(sandbox: Sandbox, text: str) -> bool:
    store = sandbox.store
    try:
        reply = parse_repair(text)
    except MalformedLLMOutput:
        return True
    mark_after(sandbox)
    source = store.require("aaaaaaaaaaa1")
    review = review_merge(
        reply.content, [source.id], {source.id: source}, {source.id: source.fingerprint}
    )
    if review.accepted:
        merged = merged_entry(
            "0000000000f1", MergeProposal(reply.content, source.category), [source], T0
        )
        store.put(merged, action=JournalAction.MERGED)
    return not review.accepted


REPAIR = Surface("LLM repair reply", repair_replies, run_repair)

_preference_fields = st.fixed_dictionaries(
    {
        "content": maybe(
            st.one_of(hostile_text, json_values), sane_text.map(lambda t: f"The user prefers {t}")
        ),
        "tags": maybe(
            st.one_of(tags_lists, st.just([f"p{n}" for n in range(32)]), json_values), sane_tags
        ),
        "importance": maybe(
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), json_values), sane_importance
        ),
    }
)
preference_replies = llm_replies(_preference_fields, lambda items: {"toSave": items})


def run_preferences(sandbox: Sandbox, text: str) -> bool:
    try:
        reply = parse_preferences(text)
    except MalformedLLMOutput:
        return True
    mark_after(sandbox)
    for index, pref in enumerate(reply.to_save):
        fact = FactProposal(
            content=pref.content,
            category="user-preferences/inferred",
            tags=list(dict.fromkeys([*pref.tags, "inferred"])),
            importance=pref.importance,
            metadata={"source": "inferred"},
        )
        save_fact(
            sandbox.store,
            Candidate(
                fact.content,
                fact.category,
                tuple(fact.tags),
                tuple(fact.metadata.items()),
                fact.importance,
            ),
            new_id=f"{index + 1:012x}",
            op_id=f"pref-{index}",
        )
    return not reply.to_save


PREFERENCES = Surface("LLM preference reply", preference_replies, run_preferences)
