"""One function per `dreamkeeper` subcommand: (args, settings) → exit code.

Bad input raises `InvalidInput` (exit 2), an unreachable server or worker `Unavailable`
(exit 1); `worker.cli` turns both into one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dreamkeeper.agent.recall import SEARCH_MEMORY, empty_result
from dreamkeeper.core.errors import InvalidInput, NotFound, Unavailable
from dreamkeeper.core.models import SOURCE_KEY, MemoryEntry, utc_now
from dreamkeeper.core.settings import (
    StoreSettings,
    TemporalSettings,
    describe,
    embedding_settings,
    load_settings,
)
from dreamkeeper.core.validation import (
    MAX_CONTENT_CHARS,
    validate_category,
    validate_content,
    validate_entry_id,
    validate_importance,
    validate_tags,
)
from dreamkeeper.policies.provenance import parse_source
from dreamkeeper.stores.embedding_client import embedding_client
from dreamkeeper.stores.memory_store import FileMemoryStore
from dreamkeeper.stores.search import display_text, format_hit, format_taxonomy, search
from dreamkeeper.cli.serve import service_settings

if TYPE_CHECKING:
    from dreamkeeper.agent.remote import RemoteMemoryClient

MAX_RETENTION_DAYS = 36_500


def read_content(args: argparse.Namespace) -> str:
    """CONTENT, or `-` for stdin, or --file PATH (for content too long for an argv)."""
    if args.file is not None and args.content is not None:
        raise InvalidInput("give CONTENT or --file, not both")
    if args.file is not None:
        try:
            with open(args.file, "rb") as handle:
                data = handle.read(_READ_CAP)
        except OSError as exc:
            raise InvalidInput(f"cannot read {args.file}: {exc.strerror or exc}") from None
        return _decode(data, args.file)
    if args.content == "-":
        return _decode(sys.stdin.buffer.read(_READ_CAP), "stdin")
    if args.content is None:
        raise InvalidInput("save needs CONTENT, '-' (stdin) or --file PATH")
    return args.content


# At most 4 bytes a character: a read this long holds more characters than the limit.
_READ_CAP = MAX_CONTENT_CHARS * 4 + 1


def _decode(data: bytes, where: str) -> str:
    if len(data) >= _READ_CAP:
        # Only the first bytes were read: their count is not the size, so name the limit.
        raise InvalidInput(
            f"{where} holds more than {MAX_CONTENT_CHARS} characters: the limit is "
            f"{MAX_CONTENT_CHARS}; split it into focused entries"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{where} is not UTF-8 text") from None


def _entry_json(entry: MemoryEntry, score: float | None = None) -> dict[str, Any]:
    data = entry.model_dump(mode="json", by_alias=True, exclude={"applied_ops"})
    if score is not None:
        data["score"] = round(score, 6)
    return data


def _print_entries(entries: list[MemoryEntry], store: FileMemoryStore) -> None:
    now = store.now()
    for entry in entries:
        print(format_hit(entry, now))


def _store(settings: StoreSettings, *, hybrid: bool = False) -> FileMemoryStore:
    embeddings = embedding_client(embedding_settings()) if hybrid else None
    return FileMemoryStore(settings.data_dir, settings.agent_id, embeddings=embeddings)


# -- against a remote `dreamkeeper serve` (--url / DREAMKEEPER_URL) ----------------------


def _remote(args: argparse.Namespace) -> RemoteMemoryClient | None:
    """The remote client when --url or DREAMKEEPER_URL names a server; --direct then makes
    no sense (the store is the server's)."""
    service = service_settings(args)
    if not service.url:
        return None
    if getattr(args, "direct", False):
        raise InvalidInput("--direct writes a local store: it cannot be used with --url")
    from dreamkeeper.agent.remote import RemoteMemoryClient

    return RemoteMemoryClient(service.url, token=service.token)


def refuse_url(args: argparse.Namespace, what: str) -> None:
    """`what` works on the local store only: refuse rather than act on another store than
    the one --url (or DREAMKEEPER_URL) names."""
    url = service_settings(args).url
    if not url:
        return
    given = "--url" if getattr(args, "url", None) is not None else "DREAMKEEPER_URL"
    raise InvalidInput(
        f"{what} works on a local data directory, not through a serve: {given} is set "
        f"({url}); run it where that server's data directory is, without {given}"
    )


def require_store(settings: StoreSettings, agent_id: str | None = None) -> None:
    """The data directory and the agent's store must exist: a read of a mistyped path or
    agent would otherwise answer "nothing matched", and opening the store creates its
    directory and lock file. Like serve, an agent exists once it has a directory."""
    data_dir = settings.data_dir
    agent = agent_id or settings.agent_id
    if not data_dir.is_dir():
        raise NotFound(
            f"data directory {data_dir} does not exist (--data or DREAMKEEPER_DATA; "
            "`save` or `import` creates it)"
        )
    agents = data_dir / "agents"
    if not (agents / agent).is_dir():
        known = sorted(p.name for p in agents.iterdir() if p.is_dir()) if agents.is_dir() else []
        raise NotFound(
            f"unknown agent {agent!r}: it has no store in {data_dir} "
            f"(agents there: {', '.join(known) if known else 'none'})"
        )


# -- through the worker (a workflow each, with a history) -------------------------------


async def _memory_client(settings: StoreSettings):
    from dreamkeeper.agent.client import MemoryClient

    temporal = TemporalSettings.from_env()
    try:
        return await MemoryClient.connect(settings, temporal)
    except RuntimeError as exc:  # the SDK's "cannot connect"
        raise Unavailable(
            f"cannot reach Temporal at {temporal.address} ({exc}); start `dreamkeeper dev`, "
            "or pass --direct to write the store without the worker"
        ) from None


def save(args: argparse.Namespace, settings: StoreSettings) -> int:
    content = validate_content(read_content(args))
    parsed = parse_source(args.source)
    remote = _remote(args)
    if remote is not None:
        ack = asyncio.run(
            remote.save_memory(
                settings.agent_id,
                content,
                category=args.category,
                tags=args.tags,
                source=args.source,
                importance=args.importance,
                entry_id=args.entry_id,
                idempotency_key=args.idempotency_key,
            )
        )
        print(ack.entry_id)
    elif args.direct:
        metadata = {SOURCE_KEY: parsed.value} if parsed.value else {}
        entry = _store(settings).create(
            content,
            category=args.category,
            tags=args.tags,
            metadata=metadata,
            importance=args.importance,
            entry_id=args.entry_id,
        )
        print(entry.id)
    else:
        # Refuse bad input here, before needing a server, with the same messages.
        validate_category(args.category)
        validate_tags(args.tags)
        validate_importance(args.importance)
        if args.entry_id is not None:
            validate_entry_id(args.entry_id)

        async def go() -> str:
            memory = await _memory_client(settings)
            ack = await memory.save_memory(
                settings.agent_id,
                content,
                category=args.category,
                tags=args.tags,
                source=args.source,
                importance=args.importance,
                entry_id=args.entry_id,
                idempotency_key=args.idempotency_key,
            )
            return ack.entry_id

        print(asyncio.run(go()))
    if parsed.note:
        print(f"note: {parsed.note}", file=sys.stderr)
    return 0


def delete(args: argparse.Namespace, settings: StoreSettings) -> int:
    validate_entry_id(args.id)
    remote = _remote(args)
    if remote is not None:
        entry_id = asyncio.run(remote.delete_memory(settings.agent_id, args.id)).entry_id
    elif args.direct:
        entry_id = _store(settings).archive(args.id, "deleted by agent tool").id
    else:

        async def go() -> str:
            memory = await _memory_client(settings)
            return (await memory.delete_memory(settings.agent_id, args.id)).entry_id

        entry_id = asyncio.run(go())
    print(f"archived {entry_id} (recoverable with `dreamkeeper restore {entry_id}` until purged)")
    return 0


def restore(args: argparse.Namespace, settings: StoreSettings) -> int:
    validate_entry_id(args.id)
    remote = _remote(args)
    if remote is not None:
        result = remote.restore_memory(settings.agent_id, args.id, force=args.force)
        entry_id = asyncio.run(result).entry_id
    elif args.direct:
        entry_id = _store(settings).restore(args.id, force=args.force).id
    else:

        async def go() -> str:
            memory = await _memory_client(settings)
            result = await memory.restore_memory(settings.agent_id, args.id, force=args.force)
            return result.entry_id

        entry_id = asyncio.run(go())
    print(f"restored {entry_id}")
    return 0


# -- reads and local maintenance ---------------------------------------------------------


def _metadata_args(pairs: list[str]) -> dict[str, str]:
    metadata = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InvalidInput(f"invalid --meta {pair!r}: expected KEY=VALUE")
        metadata[key] = value
    return metadata


def search_cmd(args: argparse.Namespace, settings: StoreSettings) -> int:
    metadata = _metadata_args(args.metadata)
    remote = _remote(args)
    if remote is not None:
        return _remote_search(args, settings, remote, metadata)
    store = _store(settings, hybrid=True)
    hits = search(store, args.query, **_search_filters(args, metadata))
    if args.json:
        print(json.dumps([_entry_json(h.entry, h.score) for h in hits], indent=2))
        return 0
    _print_entries([h.entry for h in hits], store)
    if args.query and args.query.strip():
        if not hits:
            print(empty_result(SEARCH_MEMORY, args.query))
    else:
        if not hits:
            print("No live memories in this scope.")
        print(format_taxonomy(store.categories()))
    return 0


def _search_filters(args: argparse.Namespace, metadata: dict[str, str]) -> dict[str, Any]:
    """`search`'s filters, the same for the store and a remote serve."""
    return {
        "category": args.category,
        "tags": args.tags,
        "limit": args.limit,
        "include_archived": args.include_archived,
        "created_after": args.created_after,
        "created_before": args.created_before,
        "metadata": metadata,
    }


def _remote_search(
    args: argparse.Namespace,
    settings: StoreSettings,
    remote: RemoteMemoryClient,
    metadata: dict[str, str],
) -> int:
    hits = remote.search_memory(settings.agent_id, args.query, **_search_filters(args, metadata))
    if args.json:
        print(json.dumps([_entry_json(h.entry, h.score) for h in hits], indent=2))
        return 0
    now = utc_now()
    for hit in hits:
        print(format_hit(hit.entry, now))
    if args.query and args.query.strip() and not hits:
        print(empty_result(SEARCH_MEMORY, args.query))
    elif not hits:
        print("No live memories in this scope.")
    return 0


def tags(args: argparse.Namespace, settings: StoreSettings) -> int:
    found = _store(settings).tags()
    if args.json:
        print(json.dumps(found))
    else:
        print("\n".join(found) if found else "No tags on live memories.")
    return 0


def show(args: argparse.Namespace, settings: StoreSettings) -> int:
    remote = _remote(args)
    if remote is not None:
        entry = remote.get_memory(settings.agent_id, validate_entry_id(args.id))
        if args.json:
            print(json.dumps(_entry_json(entry), indent=2))
        else:
            print(format_hit(entry, utc_now()))
            print(display_text(entry.content, keep_newlines=True))
        return 0
    store = _store(settings)
    entry = store.require(args.id)
    if args.json:
        print(json.dumps(_entry_json(entry), indent=2))
    else:
        _print_entries([entry], store)
        print(display_text(entry.content, keep_newlines=True))
    return 0


def archived(args: argparse.Namespace, settings: StoreSettings) -> int:
    remote = _remote(args)
    entries = (
        remote.archived(settings.agent_id) if remote is not None else _store(settings).archived()
    )
    if args.json:
        print(json.dumps([_entry_json(e) for e in entries], indent=2))
    elif not entries:
        print("No archived memories.")
    else:
        now = utc_now()
        for entry in entries:
            print(format_hit(entry, now))
    return 0


def purge(args: argparse.Namespace, settings: StoreSettings) -> int:
    days = args.retention_days
    if days is not None and not -1 <= days <= MAX_RETENTION_DAYS:
        raise InvalidInput(f"--retention-days {days} is out of range (-1 to {MAX_RETENTION_DAYS})")
    retention = settings.archive_retention if days is None else timedelta(days=days)
    store = _store(settings)
    if retention <= timedelta(0):
        # Zero or less turns purging off: the store keeps everything and counts nothing.
        print(
            f"purge is off (retention {retention.days} days): kept all "
            f"{len(store.archived())} archived"
        )
        return 0
    report = store.purge(retention, keep=settings.floor.protects)
    print(
        f"purged {len(report.purged)} of {report.considered} archived "
        f"({report.kept_in_retention} within retention, "
        f"{len(report.kept_high_value)} kept above the high-value floor)"
    )
    return 0


def stats(args: argparse.Namespace, settings: StoreSettings) -> int:
    store = _store(settings)
    live = store.entries()
    sources: dict[str, int] = {}
    for entry in live:
        key = entry.source or "unknown"
        sources[key] = sources.get(key, 0) + 1
    print(
        json.dumps(
            {
                "agent": store.agent_id,
                "live": len(live),
                "archived": len(store.archived()),
                "categories": store.categories(),
                "sources": dict(sorted(sources.items())),
                "skippedFiles": {str(p): reason for p, reason in store.problems().items()},
            },
            indent=2,
        )
    )
    return 0


def config(args: argparse.Namespace, settings: StoreSettings) -> int:
    """The effective settings (environment, then --data/--agent), secrets masked."""
    effective = dataclasses.replace(load_settings(), store=settings)
    from dreamkeeper.client.codec import DATA_DIR_KEY_FILE  # only here: it loads crypto

    sections = describe(effective)
    dev_key = settings.data_dir / DATA_DIR_KEY_FILE
    codec = effective.codec
    if codec.payload_key is None and codec.payload_key_file is None and dev_key.is_file():
        sections["codec"]["payload_key_file"] = f"{dev_key} (the data directory's key)"
    if args.json:
        print(json.dumps(sections, indent=2))
        return 0
    for section, values in sections.items():
        print(f"[{section}]")
        for name, value in values.items():
            print(f"{name} = {value}")
        print()
    return 0


def demo(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.cli.demo import run_demo

    run_demo(keep=args.keep)
    return 0


# -- long-running processes --------------------------------------------------------------


def worker(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.worker import runtime

    asyncio.run(runtime.run_worker(settings, TemporalSettings.from_env(), reclaim=args.reclaim))
    return 0


def dev(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.worker import runtime
    from dreamkeeper.cli.serve import require_free_port

    service = service_settings(args)
    for port in (args.temporal_port, args.ui_port):
        if port is not None and not 0 < port < 65_536:
            raise InvalidInput(f"port {port} is out of range (1-65535)")
    if not args.demo:  # `serve` runs on the dev server: its port too, before starting it
        require_free_port(service.host, service.port)
    try:
        asyncio.run(
            runtime.run_dev(
                settings,
                TemporalSettings.from_env(),
                demo=args.demo,
                service=service,
                grpc_port=args.temporal_port,
                ui_port=args.ui_port,
            )
        )
    except runtime.PortTaken as exc:
        raise InvalidInput(str(exc)) from None
    return 0


def embed_server(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.service.embedding_server import LocalModelMissing, serve

    try:
        serve(args.host, args.port)
    except LocalModelMissing as exc:
        raise InvalidInput(str(exc)) from None
    except OSError as exc:
        raise InvalidInput(f"cannot listen on {args.host}:{args.port}: {exc}") from None
    return 0


def codec_server(args: argparse.Namespace, settings: StoreSettings) -> int:
    from dreamkeeper.service.codec_server import serve_cli

    return serve_cli(args.host, args.port, settings.data_dir)
