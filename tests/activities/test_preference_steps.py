"""Preference inference at the activity boundary: the rotation answers with the rotated
log's document name (readable by any worker), and inference reads only a log this
agent's rotation produced — by that name, or by the absolute path a workflow started
before logs were documents still carries."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from temporalio.exceptions import ApplicationError

from dreamkeeper.activities.preferences import PreferenceActivities
from dreamkeeper.core.dream_payloads import CycleInput, InferInput
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.settings import LLMSettings
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.testing.scripted_llm import Reply
from tests.activities.conftest import AGENT

T0 = datetime(2026, 5, 1, tzinfo=UTC)


@pytest.fixture
def preferences(registry, llm):
    return PreferenceActivities(
        registry, LLMSettings(base_url=llm.base_url, model="scripted", timeout_seconds=30)
    )


async def test_the_rotated_log_is_named_as_a_document_and_read_by_that_name(
    run, registry, preferences, llm, tmp_path
):
    with registry.using(AGENT) as store:
        ConversationLog(store.documents).append("s1", "user", "I never take sugar.", T0)
    rotated = run(preferences.rotate_conversation_log, CycleInput(agent_id=AGENT, as_of=T0))
    assert rotated.path == "conversation-log/processed/turns-20260501T000000.jsonl"
    assert rotated.turns == 1
    replies = {"toSave": [{"content": "The user takes no sugar.", "importance": 0.6}]}
    for reference in (
        rotated.path,
        str(tmp_path / "agents" / AGENT / rotated.path),  # from an older workflow
    ):
        llm.replies.append(Reply(json.dumps(replies)))
        inferred = await run(
            preferences.infer_preferences, InferInput(agent_id=AGENT, path=reference)
        )
        assert [f.content for f in inferred.facts] == ["The user takes no sugar."]
    assert "I never take sugar." in llm.requests[0]["messages"][1]["content"]


@pytest.mark.parametrize(
    "reference",
    [
        "conversation-log/turns.jsonl",  # the live log, not a rotated one
        "dreams/run-1.jsonl",
        "conversation-log/processed/../../dreams/run-1.jsonl",
        "/data/agents/someone-else/conversation-log/processed/turns-1.jsonl",
        "/etc/passwd",
    ],
)
async def test_inference_refuses_anything_but_this_agents_rotated_log(run, preferences, reference):
    with pytest.raises(ApplicationError) as caught:
        await run(preferences.infer_preferences, InferInput(agent_id=AGENT, path=reference))
    failure = caught.value
    assert failure.type == InvalidInput.failure_type and failure.non_retryable
