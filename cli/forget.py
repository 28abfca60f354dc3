"""`dreamkeeper forget`: erase memories now, on a person's request, with a receipt.

Entries by id, every entry containing a phrase (--match), or the whole agent
(--whole-agent); from every tier of the store and, with a payload key, the agent's
Temporal histories (its data key is destroyed). Like every write it goes through the
worker (the Forget workflow), or through the serve --url names. Prints the receipt: what
went where, and the verification. Exit 0 when the verification found the text nowhere
(or a dry run), 1 when it still matches something (a derived entry kept: see --derived)
or no worker answered (the request stays queued: ask again with its --request-id).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from dreamkeeper.cli.common import Subparsers, add_json, memory_client, remote_client
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.forgetting import REQUEST_ID, ForgetReceipt, ForgetRequest
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.core.validation import validate_entry_id


def forget_cmd(args: argparse.Namespace, settings: StoreSettings) -> int:
    if args.request_id is not None and not REQUEST_ID.fullmatch(args.request_id):
        raise InvalidInput(
            f"--request-id {args.request_id!r}: 1-64 letters, digits, - and _ (first a "
            "letter or digit)"
        )
    request = ForgetRequest(
        ids=[validate_entry_id(i) for i in args.ids],
        match=args.match,
        whole_agent=args.whole_agent,
        derived=args.derived,
        dry_run=args.dry_run,
        request_id=args.request_id,
    )
    try:
        request.checked()
    except InvalidInput as exc:
        raise InvalidInput(f"{exc} (IDs, --match PHRASE or --whole-agent)") from None
    remote = remote_client(args)

    async def go() -> ForgetReceipt:
        memory = remote if remote is not None else await memory_client(settings)
        try:
            return await memory.forget(settings.agent_id, request)
        finally:
            await memory.aclose()

    receipt = asyncio.run(go())
    if args.json:
        print(json.dumps(receipt.model_dump(mode="json", by_alias=True), indent=2))
    else:
        _print(receipt)
    return 0 if receipt.dry_run or receipt.verified else 1


def _print(receipt: ForgetReceipt) -> None:
    what = "would forget" if receipt.dry_run else "forgot"
    target = (
        "the whole agent"
        if receipt.scope == "agent"
        else f"{len(receipt.entries)} memor{'y' if len(receipt.entries) == 1 else 'ies'}"
    )
    print(f"{what} {target} of agent {receipt.agent_id} (request {receipt.request_id})")
    for entry_id in receipt.entries:
        print(f"  entry {entry_id}")
    for entry_id in receipt.derived:
        if entry_id in receipt.entries:
            note = "erased"
        elif entry_id in receipt.rewritten:
            note = "rewritten without it"
        else:
            note = "kept: --derived forget erases it, --derived rewrite tries to rewrite it"
        print(f"  derived {entry_id} (its mergedFrom chain includes a forgotten entry; {note})")
    for entry_id in receipt.restored:
        print(f"  restored {entry_id} (it had been merged only into an erased entry)")
    for removal in receipt.removed:
        print(f"  removed {removal.count} {removal.what} from {removal.place}")
    if receipt.history_note:
        print(f"  note: {receipt.history_note}")
    for request_id in receipt.resumed:
        print(f"  finished earlier request {request_id}, interrupted before")
    if receipt.dry_run:
        return
    v = receipt.verification
    where = (
        "rows the database keeps for the agent (sealed ones opened)"
        if v.scanned == "rows"
        else "files under the agent's directory"
    )
    if receipt.verified:
        print(
            f"verified: {v.searches} search(es) match nothing, and none of {v.files_scanned} "
            f"{where} contains the text"
        )
    else:
        print(
            f"NOT verified: {v.search_matches} search hit(s) still match; still in: "
            f"{', '.join(v.files_containing) or 'nowhere'}; derived entries kept: "
            f"{', '.join(receipt.kept_derived) or 'none'}"
            + "".join(f"; {failed}" for failed in v.failed)
        )
    for check in v.checked:
        print(f"  checked: {check}")
    for note in receipt.left_to_operator:
        print(f"left to the operator: {note}")


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "forget",
        help="erase memories now, from every tier and the agent's Temporal histories, "
        "with a receipt (not archive: nothing to restore)",
    )
    p.set_defaults(handler=forget_cmd, existing_store=True)
    p.add_argument("ids", nargs="*", metavar="ID", help="entry ids to forget")
    p.add_argument("--match", help="forget every memory whose text contains this phrase")
    p.add_argument(
        "--whole-agent", action="store_true", help="forget everything of --agent, keys included"
    )
    p.add_argument(
        "--derived",
        choices=("report", "forget", "rewrite"),
        default="report",
        help="entries merged from a forgotten one: report them (default), forget them "
        "too, or rewrite them without it where the coverage check allows",
    )
    p.add_argument("--dry-run", action="store_true", help="say what would go; change nothing")
    p.add_argument(
        "--request-id",
        help="name the request (letters, digits, - and _): asked again with the same id, "
        "the same run answers (default: a new id)",
    )
    add_json(p)
