"""Inferred preferences that touch security, credentials or money need the user's
permission before the agent acts on them. Decided here by keywords, by the host — not
left to the LLM that inferred the preference."""

from __future__ import annotations

import re

from dreamkeeper.policies.provenance import INFERRED

INFERRED_CATEGORY = "user-preferences/inferred"
PERMISSION_KEY = "requires_user_permission"
_SENSITIVE = re.compile(
    r"\b(?:passwords?|passphrases?|passcodes?|credentials?|secrets?|tokens?|api[ -]?keys?|"
    r"keys?|2fa|mfa|otp|logins?|sign[ -]?in|ssh|security|secure|encrypt\w*|auth\w*|"
    r"permissions?|access|bank\w*|cards?|payments?|pay|paying|paid|money|cash|purchases?|"
    r"buy\w*|spend\w*|transfers?|invoices?|billing|bills?|prices?|budget\w*|refunds?|"
    r"crypto\w*|wallets?|accounts?|subscriptions?|dollars?|euros?)\b|[$€£¥]",
    re.IGNORECASE,
)


def needs_permission(text: str) -> bool:
    return _SENSITIVE.search(text) is not None


def replaces_on_conflict(category: str | None, source: str | None) -> bool:
    """An inferred preference replaces the inferred preference it conflicts with (its
    nearest near-duplicate that it neither repeats nor extends): the newer inference
    is the user's current preference, the older one history."""
    return category == INFERRED_CATEGORY and source == INFERRED
