"""The `dreamkeeper` command line.

Exit codes: 0 success; 2 the request cannot be done as asked (bad input, unknown id,
conflict, a setting out of range, another store on the task queue) — one line on
stderr; 1 anything else (Temporal or a worker unreachable in time, an unexpected
error); 130 interrupted (Ctrl-C). Output cut short by a closed pipe (`| head`) is not
an error. The console script exits through `entry()`, which flushes and ends the process
at once: interpreter shutdown with the Temporal SDK's runtime threads alive can abort
(exit 134 or 139) after the work is done.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from dreamkeeper.core.errors import DreamkeeperError, InvalidInput
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores.search import DEFAULT_LIMIT
from dreamkeeper.worker import commands, service_commands
from dreamkeeper.worker.logs import configure_logging

Command = Callable[[argparse.Namespace, StoreSettings], int]


class UsageError(InvalidInput):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other bad input
        raise UsageError(f"{self.prog}: {message}")


def _direct(p: argparse.ArgumentParser) -> None:
    p.add_argument("--direct", action="store_true", help="write the store, not via the worker")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dreamkeeper", description="Long-term memory for LLM agents.")
    parser.add_argument(
        "--data", help="data directory (env DREAMKEEPER_DATA, default ./.dreamkeeper)"
    )
    parser.add_argument("--agent", help="agent id (env DREAMKEEPER_AGENT, default 'default')")
    parser.add_argument(
        "--url",
        help="a `dreamkeeper serve` to read and write through (env DREAMKEEPER_URL); "
        "--data is then that server's",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("save", help="save a memory; prints its id once it is durable")
    p.set_defaults(run=commands.save)
    p.add_argument("content", nargs="?", help="the text, or - to read it from stdin")
    p.add_argument("--file", help="read the text from this file")
    p.add_argument("--category")
    p.add_argument("--tag", action="append", dest="tags", default=[])
    p.add_argument("--source", help="user, tool:<name> or inferred")
    p.add_argument("--importance", type=float, default=0.5)
    p.add_argument("--entry-id", help="the id to save under: repeating the call is safe")
    p.add_argument("--idempotency-key", help="derive the id from this key (same effect)")
    _direct(p)

    p = sub.add_parser("search", help="search memories; no query browses recent ones")
    p.set_defaults(run=commands.search_cmd)
    p.add_argument("query", nargs="?")
    p.add_argument("--category")
    p.add_argument("--tag", action="append", dest="tags", default=[])
    p.add_argument(
        "--meta",
        action="append",
        dest="metadata",
        default=[],
        metavar="KEY=VALUE",
        help="only entries whose metadata has KEY equal to VALUE (repeatable)",
    )
    p.add_argument("--created-after", help="ISO 8601 date or time, inclusive")
    p.add_argument("--created-before", help="ISO 8601 date or time, inclusive")
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT)
    p.add_argument("--include-archived", action="store_true")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("tags", help="the distinct tags of live memories, sorted")
    p.set_defaults(run=commands.tags)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("show", help="show one memory, archived ones too")
    p.set_defaults(run=commands.show)
    p.add_argument("id")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("delete", help="archive a memory (recoverable until purged)")
    p.set_defaults(run=commands.delete)
    p.add_argument("id")
    _direct(p)

    p = sub.add_parser("restore", help="bring an archived memory back")
    p.set_defaults(run=commands.restore)
    p.add_argument("id")
    p.add_argument(
        "--force",
        action="store_true",
        help="even if what it was merged into is live (then both count it)",
    )
    _direct(p)

    p = sub.add_parser("archived", help="list archived memories")
    p.set_defaults(run=commands.archived)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("purge", help="hard-delete memories archived longer than the retention")
    p.set_defaults(run=commands.purge)
    p.add_argument("--retention-days", type=int)

    p = sub.add_parser("stats", help="counts, categories, sources and skipped files")
    p.set_defaults(run=commands.stats)
    p = sub.add_parser("config", help="print the effective settings (secrets hidden)")
    p.set_defaults(run=commands.config)
    p.add_argument("--json", action="store_true", help="as JSON, one object per section")
    p = sub.add_parser("worker", help="run the Temporal worker (TEMPORAL_ADDRESS, ...)")
    p.set_defaults(run=commands.worker)
    p.add_argument(
        "--reclaim",
        action="store_true",
        help="take over a task queue claimed by another data directory",
    )
    p = sub.add_parser(
        "dev",
        help="start a local Temporal dev server (UI :8233) and `serve` on it (worker + API)",
    )
    p.set_defaults(run=commands.dev)
    p.add_argument("--demo", action="store_true", help="run a short tour through the workflows")
    p = sub.add_parser(
        "embed-server", help="serve local embeddings (extra: dreamkeeper[local-embeddings])"
    )
    p.set_defaults(run=commands.embed_server)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p = sub.add_parser("codec-server", help="decrypt payloads for the Temporal UI and CLI")
    p.set_defaults(run=commands.codec_server)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8081)
    p = sub.add_parser(
        "serve", help="run the worker and the memory service (HTTP API, MCP, /metrics)"
    )
    p.set_defaults(run=service_commands.serve)
    p.add_argument("--host", help="address to bind (env DREAMKEEPER_SERVE_HOST, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (env DREAMKEEPER_SERVE_PORT, 8780)")
    p.add_argument(
        "--reclaim",
        action="store_true",
        help="take over a task queue claimed by another data directory",
    )
    p = sub.add_parser("mcp", help="the memory tools as an MCP server over stdio (--agent)")
    p.set_defaults(run=service_commands.mcp_stdio)
    p.add_argument("--session", default="mcp", help="the session id the tools work in")
    p = sub.add_parser("export", help="write an agent's memories to a versioned JSON Lines file")
    p.set_defaults(run=service_commands.export_cmd)
    p.add_argument("--output", "-o", help="file to write (default: stdout)")
    p.add_argument("--include-archived", action="store_true")
    p.add_argument("--with-vectors", action="store_true", help="add each entry's stored vector")
    p = sub.add_parser("import", help="bring memories from an export file into --agent's store")
    p.set_defaults(run=service_commands.import_cmd)
    p.add_argument("file", help="an export file (- for stdin)")
    p.add_argument("--dry-run", action="store_true", help="show what would change, write nothing")
    p = sub.add_parser("demo", help="a short tour against a throwaway store")
    p.set_defaults(run=commands.demo)
    p.add_argument("--keep", action="store_true", help="keep the demo store afterwards")
    return parser


def _settings(args: argparse.Namespace) -> StoreSettings:
    settings = StoreSettings.from_env()
    overrides: dict[str, object] = {}
    # An empty --data or --agent is a mistake, not "the default": refused, never a write
    # to ./.dreamkeeper or agent 'default' the caller did not name.
    if args.data is not None:
        if not args.data.strip():
            raise InvalidInput("--data is empty: name a data directory")
        overrides["data_dir"] = Path(args.data)
    if args.agent is not None:
        overrides["agent_id"] = validate_agent_id(args.agent)
    if overrides:
        settings = StoreSettings(**{**settings.__dict__, **overrides})
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (for tests: no process exit here)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        # Long-running commands report what they do; one-shot commands only what went wrong.
        quiet = args.command not in (
            "worker",
            "dev",
            "serve",
            "codec-server",
            "embed-server",
            "demo",
        )
        configure_logging(verbose=args.verbose, quiet=quiet)
        run: Command = args.run
        return run(args, _settings(args))
    except DreamkeeperError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:  # argparse's --help: its code, not a process exit
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except BrokenPipeError:
        raise
    except Exception as exc:  # noqa: BLE001 - the CLI reports, it does not trace back
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def entry() -> NoReturn:
    """The console script: run, flush, and end the process with exactly that code."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        code = 0  # the reader went away (`| head`): nothing more to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    try:
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    entry()
