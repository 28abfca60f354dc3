from __future__ import annotations

import pytest

from dreamkeeper.core.errors import InvalidInput, NotFound
from dreamkeeper.core.validation import MAX_CONTENT_CHARS
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.search.query import search
from tests.helpers import tree_snapshot


@pytest.mark.parametrize("category", ["../x", "/abs", "a//b", "", "a/../b", "a/b/", "a b", "é"])
def test_bad_category_is_refused_and_nothing_changes(store, tmp_path, category):
    store.create("a fact worth keeping")
    before = tree_snapshot(tmp_path)
    with pytest.raises(InvalidInput, match="category"):
        store.create("another fact", category=category)
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize("agent", ["../etc", "a/b", "", ".hidden", "x" * 65, "a b"])
def test_bad_agent_id_is_refused(tmp_path, agent):
    with pytest.raises(InvalidInput, match="agent id"):
        FileMemoryStore(tmp_path, agent)
    assert not (tmp_path / "agents").exists()


@pytest.mark.parametrize("entry_id", ["123", "0123456789AB", "0123456789abc", "../../etc/pa"])
def test_bad_entry_id_is_refused(store, entry_id):
    with pytest.raises(InvalidInput, match="memory id"):
        store.get(entry_id)
    with pytest.raises(InvalidInput, match="memory id"):
        store.create("x", entry_id=entry_id)


def test_oversized_and_empty_content_are_refused(store, tmp_path):
    before = tree_snapshot(tmp_path)
    with pytest.raises(InvalidInput, match="limit is"):
        store.create("x" * (MAX_CONTENT_CHARS + 1))
    with pytest.raises(InvalidInput, match="empty"):
        store.create("   ")
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize("tags", [["ok", ""], ["x" * 65], ["a\nb"], "notalist"])
def test_bad_tags_are_refused(store, tags):
    with pytest.raises(InvalidInput, match="tag"):
        store.create("fact", tags=tags)


@pytest.mark.parametrize("importance", [-0.1, 1.5, float("nan"), "high"])
def test_bad_importance_is_refused(store, importance):
    with pytest.raises(InvalidInput, match="importance"):
        store.create("fact", importance=importance)


def test_unknown_id_is_a_clear_not_found(store, tmp_path):
    before = tree_snapshot(tmp_path)
    for call in (store.require, store.restore, lambda i: store.archive(i, "r")):
        with pytest.raises(NotFound, match="no memory with id 0123456789ab"):
            call("0123456789ab")
    assert tree_snapshot(tmp_path) == before


def test_search_filter_category_is_validated(store):
    with pytest.raises(InvalidInput, match="category"):
        search(store, "x", category="../secrets")
    with pytest.raises(InvalidInput, match="limit"):
        search(store, "x", limit=0)
