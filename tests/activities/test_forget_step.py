"""The Forget workflow's step, without Temporal's server: the request sealed with the
agent's data key opens as exactly itself until the agent is forgotten, and anything else
in its place is refused without quoting it."""

from __future__ import annotations

import base64

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from dreamkeeper.activities.forget import ForgetActivities
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.client.codec import (
    PayloadDecodeError,
    PayloadErased,
    PayloadKeys,
    data_converter,
    generate_key_file,
    open_sealed,
    seal_for_agent,
)
from dreamkeeper.core.forgetting import ForgetInput, ForgetRequest
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.backends import FileBackend
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore

AGENT = "fs-agent"
phrases = st.text(min_size=3, max_size=1_000).filter(lambda t: len(t.strip()) >= 3)


@pytest.fixture
def keyed(tmp_path, monkeypatch):
    for name in ("DREAMKEEPER_PAYLOAD_KEY", "DREAMKEEPER_PAYLOAD_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    generate_key_file(tmp_path / "payload-key")
    return data_converter(PayloadKeys.from_env({}, data_dir=tmp_path))


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(phrase=phrases)
def test_a_sealed_request_opens_as_itself_until_the_agent_is_forgotten(keyed, phrase):
    request = ForgetRequest(match=phrase, request_id="r1")
    sealed = seal_for_agent(keyed, AGENT, request)
    assert phrase.encode() not in base64.b64decode(sealed)
    assert open_sealed(keyed, sealed, ForgetRequest) == request
    keyed.payload_codec.agent_keys.destroy(AGENT)
    with pytest.raises(PayloadErased):
        open_sealed(keyed, sealed, ForgetRequest)


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.one_of(st.text(max_size=200), st.binary(max_size=200).map(base64.b64encode)))
def test_anything_else_in_place_of_the_request_is_refused_without_quoting_it(keyed, garbage):
    text = garbage.decode() if isinstance(garbage, bytes) else garbage
    try:
        value = open_sealed(keyed, text, ForgetRequest)
    except PayloadDecodeError as exc:
        assert text not in str(exc) or len(text) < 3
    else:  # an empty payload is a valid empty request: the step still checks it
        assert isinstance(value, ForgetRequest)


def test_the_step_refuses_an_unreadable_request_and_changes_nothing(tmp_path, keyed):
    entry = FileMemoryStore(tmp_path, AGENT).create("Odalys keeps her locker code at 5519-XK.")
    step = ForgetActivities(StoreRegistry(FileBackend(tmp_path)), StoreSettings(data_dir=tmp_path))
    secret = "5519-XK locker"
    for sealed in (secret, base64.b64encode(secret.encode()).decode()):
        inp = ForgetInput(agent=AGENT, request_id="r1", scope="match", sealed_request=sealed)
        with pytest.raises(ApplicationError) as refused:
            ActivityEnvironment().run(step.forget, inp)
        assert refused.value.type == "InvalidInput" and refused.value.non_retryable
        assert secret not in str(refused.value)
    assert FileMemoryStore(tmp_path, AGENT).get(entry.id) is not None
