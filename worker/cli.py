"""The `dreamkeeper` command line.

Exit codes: 0 success, 2 bad input (one line on stderr), 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from dreamkeeper.agent.recall import SEARCH_MEMORY, empty_result
from dreamkeeper.policies.provenance import parse_source
from dreamkeeper.stores.embedding_client import embedding_client
from dreamkeeper.stores.memory_store import FileMemoryStore
from dreamkeeper.stores.models import SOURCE_KEY, MemoryEntry
from dreamkeeper.stores.search import DEFAULT_LIMIT, format_hit, format_taxonomy, search
from dreamkeeper.stores.validation import (
    InvalidInput,
    validate_category,
    validate_content,
    validate_entry_id,
    validate_importance,
    validate_tags,
)
from dreamkeeper.worker.settings import SettingsError, StoreSettings, embedding_settings


class UsageError(InvalidInput):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other bad input
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dreamkeeper", description="Long-term memory for LLM agents.")
    parser.add_argument(
        "--data", help="data directory (env DREAMKEEPER_DATA, default ./.dreamkeeper)"
    )
    parser.add_argument("--agent", help="agent id (env DREAMKEEPER_AGENT, default 'default')")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("save", help="save a memory; prints its id")
    p.add_argument("content")
    p.add_argument("--category")
    p.add_argument("--tag", action="append", dest="tags", default=[])
    p.add_argument("--source", help="user, tool:<name> or inferred")
    p.add_argument("--importance", type=float, default=0.5)
    p.add_argument("--direct", action="store_true", help="write the store, not via the worker")

    p = sub.add_parser("search", help="search memories; no query browses recent ones")
    p.add_argument("query", nargs="?")
    p.add_argument("--category")
    p.add_argument("--tag", action="append", dest="tags", default=[])
    p.add_argument("--created-after", help="ISO 8601 date or time, inclusive")
    p.add_argument("--created-before", help="ISO 8601 date or time, inclusive")
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT)
    p.add_argument("--include-archived", action="store_true")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("tags", help="the distinct tags of live memories, sorted")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("show", help="show one memory, archived ones too")
    p.add_argument("id")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("delete", help="archive a memory (recoverable until purged)")
    p.add_argument("id")
    p.add_argument("--direct", action="store_true", help="write the store, not via the worker")

    p = sub.add_parser("restore", help="bring an archived memory back")
    p.add_argument("id")
    p.add_argument("--direct", action="store_true", help="write the store, not via the worker")

    p = sub.add_parser("archived", help="list archived memories")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("purge", help="hard-delete memories archived longer than the retention")
    p.add_argument("--retention-days", type=int)

    sub.add_parser("stats", help="counts, categories, sources and skipped files")
    sub.add_parser("worker", help="run the Temporal worker (TEMPORAL_ADDRESS, ...)")
    p = sub.add_parser("dev", help="start a local Temporal dev server (UI :8233) and the worker")
    p.add_argument("--demo", action="store_true", help="run a short tour through the workflows")
    p = sub.add_parser(
        "embed-server", help="serve local embeddings (extra: dreamkeeper[local-embeddings])"
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p = sub.add_parser("demo", help="a short tour against a throwaway store")
    p.add_argument("--keep", action="store_true", help="keep the demo store afterwards")
    return parser


def _settings(args: argparse.Namespace) -> StoreSettings:
    settings = StoreSettings.from_env()
    overrides: dict[str, object] = {}
    if args.data:
        overrides["data_dir"] = Path(args.data)
    if args.agent:
        overrides["agent_id"] = args.agent
    if overrides:
        settings = StoreSettings(**{**settings.__dict__, **overrides})
    return settings


def _entry_json(entry: MemoryEntry, score: float | None = None) -> dict:
    data = entry.model_dump(mode="json", by_alias=True)
    if score is not None:
        data["score"] = round(score, 6)
    return data


def _print_entries(entries: list[MemoryEntry], store: FileMemoryStore) -> None:
    now = store.now()
    for entry in entries:
        print(format_hit(entry, now))


def run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    cmd = args.command
    if cmd in ("worker", "dev"):
        import asyncio

        from dreamkeeper.worker import runtime
        from dreamkeeper.worker.settings import TemporalSettings

        temporal = TemporalSettings.from_env()
        try:
            if cmd == "worker":
                asyncio.run(runtime.run_worker(settings, temporal))
            else:
                asyncio.run(runtime.run_dev(settings, temporal, demo=args.demo))
        except runtime.PortTaken as exc:
            raise InvalidInput(str(exc)) from None
        return 0
    if cmd == "embed-server":
        from dreamkeeper.worker.embedding_server import LocalModelMissing, serve

        try:
            serve(args.host, args.port)
        except LocalModelMissing as exc:
            raise InvalidInput(str(exc)) from None
        except OSError as exc:
            raise InvalidInput(f"cannot listen on {args.host}:{args.port}: {exc}") from None
        return 0
    if cmd in ("save", "delete", "restore") and not args.direct:
        return _through_worker(args, settings)
    embeddings = embedding_client(embedding_settings()) if cmd == "search" else None
    store = FileMemoryStore(settings.data_dir, settings.agent_id, embeddings=embeddings)
    if cmd == "save":
        parsed = parse_source(args.source)
        metadata = {SOURCE_KEY: parsed.value} if parsed.value else {}
        entry = store.create(
            args.content,
            category=args.category,
            tags=args.tags,
            metadata=metadata,
            importance=args.importance,
        )
        print(entry.id)
        if parsed.note:
            print(f"note: {parsed.note}", file=sys.stderr)
    elif cmd == "search":
        hits = search(
            store,
            args.query,
            category=args.category,
            tags=args.tags,
            created_after=args.created_after,
            created_before=args.created_before,
            limit=args.limit,
            include_archived=args.include_archived,
        )
        if args.json:
            print(json.dumps([_entry_json(h.entry, h.score) for h in hits], indent=2))
        else:
            _print_entries([h.entry for h in hits], store)
            if args.query and args.query.strip():
                if not hits:
                    print(empty_result(SEARCH_MEMORY, args.query))
            else:
                if not hits:
                    print("No live memories in this scope.")
                print(format_taxonomy(store.categories()))
    elif cmd == "tags":
        tags = store.tags()
        if args.json:
            print(json.dumps(tags))
        else:
            print("\n".join(tags) if tags else "No tags on live memories.")
    elif cmd == "show":
        entry = store.require(args.id)
        if args.json:
            print(json.dumps(_entry_json(entry), indent=2))
        else:
            _print_entries([entry], store)
            print(entry.content)
    elif cmd == "delete":
        entry = store.archive(args.id, "deleted by agent tool")
        print(
            f"archived {entry.id} (recoverable with `dreamkeeper restore {entry.id}` until purged)"
        )
    elif cmd == "restore":
        entry = store.restore(args.id)
        print(f"restored {entry.id}")
    elif cmd == "archived":
        entries = store.archived()
        if args.json:
            print(json.dumps([_entry_json(e) for e in entries], indent=2))
        elif not entries:
            print("No archived memories.")
        else:
            _print_entries(entries, store)
    elif cmd == "purge":
        days = args.retention_days
        retention = settings.archive_retention if days is None else timedelta(days=days)
        report = store.purge(retention, keep=settings.floor.protects)
        print(
            f"purged {len(report.purged)} of {report.considered} archived "
            f"({report.kept_in_retention} within retention, "
            f"{len(report.kept_high_value)} kept above the high-value floor)"
        )
    elif cmd == "stats":
        print(json.dumps(_stats(store), indent=2))
    elif cmd == "demo":
        from dreamkeeper.worker.demo import run_demo

        run_demo(keep=args.keep)
    return 0


def _through_worker(args: argparse.Namespace, settings: StoreSettings) -> int:
    """save / delete / restore as workflows, so each has a history in Temporal."""
    import asyncio

    from dreamkeeper.agent.client import MemoryClient
    from dreamkeeper.worker.settings import TemporalSettings

    temporal = TemporalSettings.from_env()
    agent = settings.agent_id
    # Refuse bad input here, before needing a server, with the same messages.
    if args.command == "save":
        validate_content(args.content)
        validate_category(args.category)
        validate_tags(args.tags)
        validate_importance(args.importance)
    else:
        validate_entry_id(args.id)

    async def go() -> int:
        try:
            memory = await MemoryClient.connect(settings, temporal)
        except RuntimeError as exc:
            raise ConnectionError(
                f"cannot reach Temporal at {temporal.address} ({exc}); start `dreamkeeper dev`, "
                "or pass --direct to write the store without the worker"
            ) from None
        if args.command == "save":
            ack = await memory.save_memory(
                agent, args.content, category=args.category, tags=args.tags,
                source=args.source, importance=args.importance,
            )  # fmt: skip
            print(ack.entry_id)
            if ack.note:
                print(f"note: {ack.note}", file=sys.stderr)
        elif args.command == "delete":
            result = await memory.delete_memory(agent, args.id)
            print(f"archived {result.entry_id} (recoverable with `dreamkeeper restore "
                  f"{result.entry_id}` until purged)")  # fmt: skip
        else:
            result = await memory.restore_memory(agent, args.id)
            print(f"restored {result.entry_id}")
        return 0

    return asyncio.run(go())


def _stats(store: FileMemoryStore) -> dict:
    live = store.entries()
    sources: dict[str, int] = {}
    for entry in live:
        key = entry.source or "unknown"
        sources[key] = sources.get(key, 0) + 1
    return {
        "agent": store.agent_id,
        "live": len(live),
        "archived": len(store.archived()),
        "categories": store.categories(),
        "sources": dict(sorted(sources.items())),
        "skippedFiles": {str(p): reason for p, reason in store.problems().items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.INFO,
            format="%(levelname)s %(name)s: %(message)s",
        )
        return run(args)
    except (InvalidInput, SettingsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI reports, it does not trace back
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
