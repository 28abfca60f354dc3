"""An agent's documents (`stores.contract.documents`), the medium of the dream state and the
conversation log, on both backends (`tests/stores/conftest.py`)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.stores import faults
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.files.agent_files import AgentFiles
from dreamkeeper.stores.files.documents import FileDocuments


def test_documents_write_append_list_rename_and_delete(documents, make_documents):
    assert isinstance(documents, AgentDocuments)
    assert documents.read("dreams/a.jsonl") is None and documents.written("dreams/a.jsonl") is None
    documents.write("dreams/a.jsonl", b"one\n")
    documents.append("dreams/a.jsonl", b"two\n")
    documents.append("dreams/b.jsonl", b"x\n")
    documents.write("dreams/deeper/c.jsonl", b"y\n")
    documents.write("dreamsy.json", b"{}")
    other = make_documents("a1")  # another process's view
    assert other.read("dreams/a.jsonl") == b"one\ntwo\n"
    assert other.read("dreams/a.jsonl", max_bytes=2) == b"one"  # at most max_bytes + 1
    assert other.names("dreams/") == ["dreams/a.jsonl", "dreams/b.jsonl"]  # not below
    assert other.names("dreams/b") == ["dreams/b.jsonl"]
    assert other.names("dreams") == ["dreamsy.json"]  # a prefix of names, not a folder
    assert other.written("dreams/a.jsonl") is not None
    assert documents.rename("dreams/a.jsonl", "dreams/b.jsonl")  # replaces b
    assert other.read("dreams/b.jsonl") == b"one\ntwo\n" and other.read("dreams/a.jsonl") is None
    assert not documents.rename("dreams/a.jsonl", "dreams/z.jsonl")
    assert documents.delete("dreams/b.jsonl") and not documents.delete("dreams/b.jsonl")
    assert make_documents("a2").names("dreams/") == []  # another agent's are not its own


def test_an_append_after_a_torn_tail_starts_on_a_line_of_its_own(documents):
    documents.append("log.jsonl", b'{"a": 1}\n{"b": ')  # a crash mid-append
    documents.append("log.jsonl", b'{"c": 3}\n')
    assert documents.read("log.jsonl") == b'{"a": 1}\n{"b": \n{"c": 3}\n'


_bad_names = st.one_of(
    st.sampled_from(["", "/", "a//b", "../x", "a/../b", "./a", ".hidden", "a/.tmp", "a/", "/a"]),
    st.text(min_size=1, max_size=40).filter(
        lambda s: any(not (c.isascii() and (c.isalnum() or c in "_-.:@/")) for c in s)
    ),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=_bad_names)
def test_a_name_that_is_not_a_checked_path_is_refused_by_every_operation(documents, name):
    for call in (
        lambda: documents.read(name),
        lambda: documents.write(name, b"x"),
        lambda: documents.append(name, b"x\n"),
        lambda: documents.delete(name),
        lambda: documents.rename(name, "ok.json"),
        lambda: documents.rename("ok.json", name),
        lambda: documents.written(name),
    ):
        with pytest.raises(InvalidInput):
            call()
    assert documents.names("") == []


def test_file_documents_are_the_files_dreamkeeper_always_wrote(tmp_path):
    root = tmp_path / "agents" / "a1"
    (root / "dreams").mkdir(parents=True)
    (root / "dreams" / "run-1.jsonl").write_bytes(b'{"id": "a"}\n')
    (root / "consolidation").mkdir()
    (root / "consolidation" / "clusters.json").write_bytes(b'{"clusters": []}')
    documents = FileDocuments(AgentFiles(tmp_path, "a1"))
    assert documents.read("dreams/run-1.jsonl") == b'{"id": "a"}\n'
    assert documents.read("consolidation/clusters.json") == b'{"clusters": []}'
    documents.append("conversation-log/turns.jsonl", b"line\n")
    assert (root / "conversation-log" / "turns.jsonl").read_bytes() == b"line\n"
    (root / "dreams" / "link.jsonl").symlink_to(root / "dreams" / "run-1.jsonl")
    assert documents.names("dreams/") == ["dreams/run-1.jsonl"]  # a link is no document
    with pytest.raises(OSError):
        documents.read("dreams/link.jsonl")


def test_a_database_write_that_dies_half_way_leaves_the_old_document(database_url):
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.documents import PostgresDocuments

    db = Database(database_url, max_size=2)
    documents = PostgresDocuments(db, "a1")
    documents.write("consolidation/clusters.json", b"old")
    with faults.armed(faults.ROWS_HALF_WRITTEN), pytest.raises(faults.SimulatedCrash):
        documents.write("consolidation/clusters.json", b"new")
    assert documents.read("consolidation/clusters.json") == b"old"
    db.close()
