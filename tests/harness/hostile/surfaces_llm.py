"""LLM replies, hostile by nature: enrichment, consolidation, merge repair and
preference inference, each parsed by the product's parser and then applied as the
workflow applies it."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from dreamkeeper.activities.consolidation import ConsolidationActivities, proposal_of
from dreamkeeper.activities.dream_prompts import (
    parse_consolidation,
    parse_preferences,
    parse_repair,
)
from dreamkeeper.activities.llm import (
    MAX_FACTS_PER_REPLY,
    MAX_REPLY_BYTES,
    MalformedLLMOutput,
    parse_enrichment,
)
from dreamkeeper.activities.save import SaveActivities, enrichment_result
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.dream_payloads import (
    MergeCheck,
    ProposedMerge,
    ReviewInput,
    SaveMergedInput,
)
from dreamkeeper.core.models import SOURCE_KEY
from dreamkeeper.core.payloads import FactProposal, RetireInput, SaveFactInput
from dreamkeeper.core.settings import HighValueFloor, LLMSettings
from dreamkeeper.core.validation import MAX_METADATA_VALUE_CHARS, MAX_TAGS
from dreamkeeper.policies.consolidation import (
    Verdict,
    prune_candidates,
    resolve_ids,
    without_overlaps,
)
from dreamkeeper.policies.coverage import vocabulary_payload
from dreamkeeper.policies.preferences import INFERRED_CATEGORY, PERMISSION_KEY, needs_permission
from dreamkeeper.policies.provenance import INFERRED
from dreamkeeper.stores.contract.identity import StoreIdentity
from dreamkeeper.stores.search.vocabulary import load_vocabulary
from dreamkeeper.workflows.save import derived_id
from tests.harness.hostile.sandbox import (
    AGENT,
    SEEDED,
    T0,
    Sandbox,
    Surface,
    Violation,
    mark_after,
)
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


def product_stores(sandbox: Sandbox) -> StoreRegistry:
    """The worker's store registry on the sandbox, so a reply is applied by the product's
    own activities. Its identity is given: reading it would write one beside the data,
    outside the agent's directory."""
    return StoreRegistry(sandbox.data, identity=StoreIdentity("fuzz", str(sandbox.data)))


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
                st.just({"subjectTime": "z" * (MAX_METADATA_VALUE_CHARS + 1)}),
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
        st.integers(MAX_FACTS_PER_REPLY + 1, 2_000).map(
            lambda n: [{"content": f"fact {i}"} for i in range(n)]
        ),
        st.just(
            [{"content": SEEDED["aaaaaaaaaaa1"][0], "tags": [f"new{n}" for n in range(MAX_TAGS)]}]
            * 5
        ),
    )
    well_formed = st.tuples(items.map(wrap), _fences).map(lambda v: _reply_text(*v))
    return st.one_of(
        *[well_formed.map(lambda x: x) for _ in range(6)],
        garbage.map(lambda g: g.decode("utf-8", "replace") if isinstance(g, bytes) else g),
        json_values.map(jsonable),
        st.integers(1, 40).map(lambda n: "[" + " " * (n * 25_000) + "]"),
        st.just("x" * (MAX_REPLY_BYTES + 1)),
        hostile_text,
    )


enrichment_replies = llm_replies(_fact_fields, lambda items: items)
ORIGINAL = "aaaaaaaaaaa2"


def run_enrichment(sandbox: Sandbox, text: str) -> bool:
    try:
        reply = parse_enrichment(text)
    except MalformedLLMOutput:
        return True
    mark_after(sandbox)
    if len(reply.facts) > MAX_FACTS_PER_REPLY:
        raise Violation(f"{len(reply.facts)} facts passed the cap")
    result = enrichment_result(reply, "notes", ORIGINAL)
    result.model_dump_json()  # it must travel as a Temporal payload
    saves = SaveActivities(product_stores(sandbox), LLMSettings(), HighValueFloor())
    saved: list[str] = []
    # Every fact the parser passes must save, through the save_fact activity as the Save
    # workflow calls it (ids, exclusions, one reinforcement per entry per save): never a
    # save failing half-way.
    for index, fact in enumerate(result.facts):
        outcome = saves.save_fact(
            SaveFactInput(
                agent_id=AGENT,
                new_id=derived_id(ORIGINAL, index),
                op_id=f"{ORIGINAL}-{index}",
                fact=fact,
                exclude=[ORIGINAL],
                touched=sorted(set(saved)),
            )
        )
        saved.append(outcome.entry_id)
    into = sorted(set(saved) - {ORIGINAL})
    if into:
        saves.retire_original(
            RetireInput(agent_id=AGENT, entry_id=ORIGINAL, into=into, reason="fuzz enrichment")
        )
    entry = sandbox.fresh_store().get("aaaaaaaaaaa1")
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
    proposal = proposal_of(reply, store.entries())
    shown = proposal.shown
    proposal.model_dump_json()  # it must travel as a Temporal payload
    # As the Consolidation workflow goes on: every id resolved against what was shown,
    # then the review and save activities.
    checks = []
    for merge in proposal.to_save:
        sources, _ = resolve_ids(merge.source_ids, shown)
        checks.append(
            MergeCheck(
                merge=merge.model_copy(update={"source_ids": sources}),
                shown={s: shown[s] for s in sources},
            )
        )
    applied = len(_apply_merges(sandbox, checks))
    to_delete, _ = resolve_ids(proposal.to_delete, shown)
    prune_candidates(
        to_delete,
        shown=shown,
        merge_only=[],
        merge_sources=[s for c in checks for s in c.merge.source_ids],
    )
    return applied == 0 and not to_delete


def _apply_merges(sandbox: Sandbox, checks: list[MergeCheck]) -> list[str]:
    """The review_merges and save_merged_entry activities on `checks`, keeping the
    accepted merges that share no source with an earlier one (as the workflow does).
    Returns the merged entries' ids."""
    if not checks:
        return []
    activities = ConsolidationActivities(product_stores(sandbox), LLMSettings(), HighValueFloor())
    vocabulary = vocabulary_payload(load_vocabulary(sandbox.documents).vocabulary)
    reviews = activities.review_merges(
        ReviewInput(agent_id=AGENT, checks=checks, vocabulary=vocabulary)
    ).reviews
    accepted = [i for i, r in enumerate(reviews) if r.verdict == Verdict.ACCEPTED]
    keep = without_overlaps([checks[i].merge.source_ids for i in accepted])
    merged = []
    for number, index in enumerate(accepted[k] for k in keep):
        saved = activities.save_merged_entry(
            SaveMergedInput(
                agent_id=AGENT, new_id=f"{number + 1:012x}", check=checks[index], merged_at=T0
            )
        )
        if saved.persisted:
            merged.append(saved.new_id)
    return merged


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
    try:
        reply = parse_repair(text)
    except MalformedLLMOutput:
        return True
    mark_after(sandbox)
    source = sandbox.store.require("aaaaaaaaaaa1")
    # A repaired text goes through the same review and save as the merge it repairs.
    check = MergeCheck(
        merge=ProposedMerge(
            content=reply.content, category=source.category, source_ids=[source.id]
        ),
        shown={source.id: source.fingerprint},
    )
    return not _apply_merges(sandbox, [check])


REPAIR = Surface("LLM repair reply", repair_replies, run_repair)

_preference_fields = st.fixed_dictionaries(
    {
        "content": maybe(
            st.one_of(hostile_text, json_values), sane_text.map(lambda t: f"The user prefers {t}")
        ),
        "tags": maybe(
            st.one_of(tags_lists, st.just([f"p{n}" for n in range(MAX_TAGS)]), json_values),
            sane_tags,
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
    saves = SaveActivities(product_stores(sandbox), LLMSettings(), HighValueFloor())
    # The proposal as the PreferenceInference workflow shapes it (its category, tag and
    # source, the host's permission flag), saved by the save_fact activity.
    for index, pref in enumerate(reply.to_save):
        metadata = {SOURCE_KEY: INFERRED}
        if needs_permission(pref.content):
            metadata[PERMISSION_KEY] = "true"
        fact = FactProposal(
            content=pref.content,
            category=INFERRED_CATEGORY,
            tags=list(dict.fromkeys([*pref.tags, INFERRED])),
            importance=pref.importance,
            metadata=metadata,
        )
        saves.save_fact(
            SaveFactInput(
                agent_id=AGENT, new_id=f"{index + 1:012x}", op_id=f"pref-{index}", fact=fact
            )
        )
    return not reply.to_save


PREFERENCES = Surface("LLM preference reply", preference_replies, run_preferences)
