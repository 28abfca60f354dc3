"""What an operator hands the CLI besides argv: an import file, and a dream run id to
undo. An import either brings valid entries in (exit 0) or refuses the whole file (exit
2, nothing written); an undo of a run id that is not one is refused as InvalidInput,
non-retryable, before any ledger is looked for."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile

from hypothesis import strategies as st
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from dreamkeeper.activities.dream_undo import UndoActivities
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.cli import main as cli
from dreamkeeper.core.dream_plan import UndoInput
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.stores.contract.identity import StoreIdentity
from dreamkeeper.stores.files.identity import location_of
from tests.harness.hostile.sandbox import AGENT, Sandbox, Surface, Violation
from tests.harness.hostile.strategies import entry_ids, hostile_text, maybe, sane_text

# -- surface: import files ----------------------------------------------------------------

HEADER = {"format": "dreamkeeper-export", "version": 1, "agent": "src"}
_AT = "2026-01-01T00:00:00Z"


def _deep(depth: int, opener: str) -> str:
    closer = "]" if opener == "[" else "}"
    if opener == "{":
        return '{"a":' * depth + "1" + closer * depth
    return opener * depth + closer * depth


def _entry(entry_id, content, retired, merged) -> str:
    entry: dict[str, object] = {
        "id": entry_id,
        "content": content,
        "createdAt": _AT,
        "lastSeenAt": _AT,
    }
    if retired is not None:
        entry.update(retiredInto=retired, archivedAt=_AT)
    if merged is not None:
        entry["metadata"] = {"mergedFrom": merged}
    return json.dumps({"entry": entry})


_id_lists = st.one_of(st.lists(entry_ids, max_size=3), hostile_text)
_entry_lines = st.builds(
    _entry,
    maybe(entry_ids, st.sampled_from(["0123456789ab", "0123456789ac", "aaaaaaaaaaa1"])),
    maybe(hostile_text, sane_text),
    st.one_of(st.none(), _id_lists),
    st.one_of(st.none(), _id_lists.map(json.dumps), hostile_text),
)
_lines = st.one_of(
    _entry_lines,
    _entry_lines,
    st.builds(_deep, st.sampled_from([2, 33, 1_000, 100_000]), st.sampled_from(["[", "{"])),
    hostile_text,
    st.sampled_from(['{"entry": []}', '{"entry": {"id": "0123456789ab"}}', "[]", "null"]),
)
_headers = st.one_of(
    st.just(json.dumps(HEADER)),
    st.just(json.dumps(HEADER)),
    st.builds(lambda v: json.dumps({**HEADER, "version": v}), st.sampled_from([0, 2, "1"])),
    hostile_text,
    st.builds(_deep, st.just(100_000), st.just("[")),
)
import_files = st.tuples(_headers, st.lists(_lines, max_size=4))


def run_import(sandbox: Sandbox, example) -> bool:
    header, lines = example
    # The file lives outside the sandbox root: only the import's own writes are judged.
    fd, path = tempfile.mkstemp(prefix="dk-fuzz-import-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as handle:
            handle.write("\n".join([header, *lines]) + "\n")
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["--data", str(sandbox.data), "--agent", AGENT, "import", path])
    finally:
        os.unlink(path)
    if code not in (0, 2):
        raise Violation(f"exit {code}: {err.getvalue().strip()[:300]}")
    if code == 2 and err.getvalue().count("\n") > 1:
        raise Violation(f"refusal is not one line: {err.getvalue()[:300]!r}")
    if code == 0:
        for entry in sandbox.fresh_store().entries(include_archived=True):
            # Whatever came in carries only memory ids where ids belong.
            for other in entry.retired_into:
                if len(other) != 12 or not all(c in "0123456789abcdef" for c in other):
                    raise Violation(f"imported {entry.id} retired into {other!r}")
    return code == 2


IMPORT = Surface("import file", import_files, run_import)


# -- surface: dream undo run ids ----------------------------------------------------------

run_ids = st.one_of(
    hostile_text,
    st.sampled_from(["..", "", "a/b", "../../outside", "x" * 5_000, "run-1", "-x", "a\x00b"]),
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,40}", fullmatch=True),
)


def run_undo(sandbox: Sandbox, run_id: str) -> bool:
    # An identity given, as a worker has one: the registry would otherwise claim the data
    # directory (a file beside the agents) on first use, which is not the input's doing.
    identity = StoreIdentity(store_id="fuzz", location=location_of(sandbox.data))
    undo = UndoActivities(StoreRegistry(sandbox.data, identity=identity))
    try:
        result = ActivityEnvironment().run(
            undo.undo_dream, UndoInput(agent_id=AGENT, cycle_id=run_id)
        )
    except ApplicationError as exc:
        if exc.type != InvalidInput.failure_type or not exc.non_retryable:
            raise Violation(f"{exc.type} (non_retryable={exc.non_retryable}): {exc}") from None
        return True
    if result.found:
        raise Violation(f"found a ledger for {run_id!r} in a store that has none")
    return False


UNDO = Surface("dream undo run id", run_ids, run_undo)
