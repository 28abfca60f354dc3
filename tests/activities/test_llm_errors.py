"""The LLM's failures are part of the error tree: one class per failure type, the type
string spelt once (core.errors), and the retry policies derived from the classes.

The strings themselves are pinned: they are recorded in workflow histories and matched
by running workflows' retry policies, so a rename would silently make a permanent
failure retryable (six calls to an endpoint that already said no)."""

from __future__ import annotations

import ast
import inspect

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from dreamkeeper.activities.llm import ask_llm, parse_enrichment
from dreamkeeper.core.errors import (
    DreamkeeperError,
    LLMRejected,
    LLMUnavailable,
    MalformedLLMOutput,
    Unavailable,
    error_for,
)
from dreamkeeper.core.settings import LLMSettings
from dreamkeeper.testing.scripted_llm import Reply
from dreamkeeper.workflows import options

LLM_ERRORS = (LLMRejected, MalformedLLMOutput, LLMUnavailable)


def test_the_llm_errors_keep_their_failure_types_and_map_back():
    assert [cls.failure_type for cls in LLM_ERRORS] == [
        "LLMRejected",
        "MalformedLLMOutput",
        "LLMUnavailable",
    ]
    for cls in LLM_ERRORS:
        assert issubclass(cls, DreamkeeperError)
        mapped = error_for(cls.failure_type, "the endpoint said no")
        assert type(mapped) is cls and str(mapped) == "the endpoint said no"
    assert issubclass(LLMUnavailable, Unavailable) and LLMUnavailable.retryable
    assert not LLMRejected.retryable and not MalformedLLMOutput.retryable


def test_the_llm_retry_policy_is_derived_from_the_classes():
    llm = list(options.LLM_RETRY.non_retryable_error_types or [])
    store = list(options.STORE_RETRY.non_retryable_error_types or [])
    # The same list, in the same order, as the histories were recorded with.
    assert llm == ["LLMRejected", "MalformedLLMOutput", *store]
    assert store == ["InvalidInput", "NotFound", "Conflict", "StoreMismatch"]
    assert LLMUnavailable.failure_type not in llm
    for config in (options.LLM_STEP, options.ENRICH_STEP):
        assert config["retry_policy"] is options.LLM_RETRY


def test_the_options_spell_no_failure_type():
    """A literal in a non-retryable list drifts from the class it names."""
    tree = ast.parse(inspect.getsource(options))
    literals = [
        node.value
        for keyword in ast.walk(tree)
        if isinstance(keyword, ast.keyword) and keyword.arg == "non_retryable_error_types"
        for node in ast.walk(keyword.value)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    assert literals == []


@pytest.mark.parametrize(
    ("reply", "expected", "final"),
    [
        (Reply("bad request", status=400), LLMRejected, True),
        (Reply("not JSON at all"), MalformedLLMOutput, True),
        (Reply('{"an": "object, not a list"}'), MalformedLLMOutput, True),
        (Reply("overloaded", status=503), LLMUnavailable, False),
    ],
)
async def test_ask_llm_fails_with_the_failure_type_of_its_class(llm, reply, expected, final):
    llm.replies.append(reply)
    settings = LLMSettings(base_url=llm.base_url, model="scripted", timeout_seconds=30)
    messages = [{"role": "user", "content": "The user lives in Chicago."}]

    async def enrich():
        return await ask_llm(settings, messages, parse_enrichment, "enrichment of e1")

    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(enrich)
    assert caught.value.type == expected.failure_type
    assert caught.value.non_retryable is final
    assert len(llm.requests) == 1  # one call: retrying is the policy's business


async def test_ask_llm_with_no_endpoint_is_rejected_without_a_call():
    async def enrich():
        return await ask_llm(LLMSettings(), [], parse_enrichment, "enrichment of e1")

    with pytest.raises(ApplicationError) as caught:
        await ActivityEnvironment().run(enrich)
    assert caught.value.type == LLMRejected.failure_type and caught.value.non_retryable
