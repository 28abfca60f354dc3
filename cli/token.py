"""`dreamkeeper token create|list|revoke`: the access tokens `serve` accepts besides the
shared DREAMKEEPER_SERVE_TOKEN (policies.access says what each may do; stores.tokens
keeps them hashed: under the data directory, or in the database with
DREAMKEEPER_DATABASE_URL). `create` prints the secret once: it is not
stored and cannot be shown again."""

from __future__ import annotations

import argparse
import json
import sys

from dreamkeeper.cli.common import Subparsers, add_json
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.policies.access import Access
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.contract.tokens import TokenRecord, TokenStore
from dreamkeeper.stores.tokens import issue, revoke


def _store(settings: StoreSettings) -> TokenStore:
    return open_backend(settings).tokens()


def _row(record: TokenRecord) -> dict[str, object]:
    return {
        "id": record.id,
        "name": record.name,
        "access": record.access.value,
        "agents": list(record.agents),
        "createdAt": record.created_at.isoformat(),
        "revokedAt": None if record.revoked_at is None else record.revoked_at.isoformat(),
    }


def create(args: argparse.Namespace, settings: StoreSettings) -> int:
    access = Access(args.access)
    if access is Access.ADMIN and args.scope:
        raise InvalidInput("an admin token reaches every agent: give no --scope")
    patterns = [p.strip() for value in args.scope or [] for p in value.split(",") if p.strip()]
    if access is not Access.ADMIN and not patterns:
        raise InvalidInput(
            "`token create` needs --scope: the agents the token reaches (an agent id, a prefix "
            "ending in * such as 'acme-*', or '*'; repeat or comma-separate). The global "
            "--agent does not choose a token's agents"
        )
    record, secret = issue(_store(settings), args.name, patterns, access)
    if args.json:
        print(json.dumps({**_row(record), "token": secret}))
    else:
        print(secret)
        print(
            f"token {record.id} ({record.name}): {record.access.value} on "
            f"{', '.join(record.agents)}. The secret above is shown only now: give it to "
            "the client as DREAMKEEPER_TOKEN (or `Authorization: Bearer ...`).",
            file=sys.stderr,
        )
    return 0


def list_cmd(args: argparse.Namespace, settings: StoreSettings) -> int:
    """Every readable token; with the store damaged, what is wrong too, and exit 2."""
    store = _store(settings)
    found = store.snapshot()
    records = sorted(found.records.values(), key=lambda r: (r.created_at, r.id))
    if found.damage is not None:
        print(
            f"error: the access tokens are damaged, so serve refuses every request: "
            f"{found.damage}. Repair {store.where} or restore it from a backup",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps([_row(r) for r in records], indent=2))
        return 0 if found.damage is None else 2
    if not records and found.damage is None:
        print("no tokens (serve takes DREAMKEEPER_SERVE_TOKEN alone, or none)")
    for r in records:
        state = f"revoked {r.revoked_at:%Y-%m-%d %H:%M}" if r.revoked_at else "active"
        print(
            f"{r.id}  {r.access.value:<5}  {','.join(r.agents):<24}  {state:<24}  "
            f"created {r.created_at:%Y-%m-%d %H:%M}  {r.name}"
        )
    return 0 if found.damage is None else 2


def revoke_cmd(args: argparse.Namespace, settings: StoreSettings) -> int:
    record = revoke(_store(settings), args.token_id)
    print(f"token {record.id} ({record.name}) revoked: the next request with it is refused")
    return 0


def no_action(args: argparse.Namespace, settings: StoreSettings) -> int:
    raise InvalidInput("`token` needs an action: create, list or revoke")


def register(sub: Subparsers) -> None:
    p = sub.add_parser("token", help="access tokens for serve: create, list, revoke")
    p.set_defaults(handler=no_action)
    actions = p.add_subparsers(dest="token_action", required=True, parser_class=type(p))

    a = actions.add_parser("create", help="issue a token; prints its secret once")
    a.set_defaults(handler=create, local_only=True)
    a.add_argument("name", help="what the token is for (shown by `token list`)")
    a.add_argument(
        "--scope",
        action="append",
        metavar="AGENTS",
        help="an agent id, a prefix ending in * (acme-*), or *; repeat or comma-separate",
    )
    a.add_argument(
        "--access",
        choices=[x.value for x in Access],
        default=Access.WRITE.value,
        help="read, write (read-write, the default) or admin (every agent and the operator routes)",
    )
    add_json(a)

    a = actions.add_parser("list", help="every token: id, name, access, agents, state")
    a.set_defaults(handler=list_cmd, local_only=True)
    add_json(a)

    a = actions.add_parser("revoke", help="revoke a token by id (takes effect at once)")
    a.set_defaults(handler=revoke_cmd, local_only=True)
    a.add_argument("token_id", metavar="TOKEN_ID", help="the id `token list` shows")
