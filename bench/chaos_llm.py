"""A flaky OpenAI-compatible chat endpoint on 127.0.0.1, for the kill-storm benchmark.

It answers the four prompts Dreamkeeper sends, and it misbehaves with seeded
probability on every request: it may think for 0.5–3 s, answer HTTP 500, or answer
text that is not the JSON asked for. Beyond that, per prompt:

- enrichment ("You turn a raw note …"): the note split into sentences, one fact each,
  every specific kept — or, sometimes, a lossy list that drops an e-mail or a phone
  (else a sentence, else a trailing clause);
- consolidation ("You maintain an AI agent's long-term memory"): merges of the
  near-duplicates it was shown (sometimes lossy, sometimes listing the sources in
  `toDelete` too, sometimes citing an id it was not shown — one from an earlier prompt,
  possibly another agent's, or an invented one) and prunes of status chatter;
- merge repair: honest (the missing specifics appended), lossy (the text unchanged) or
  malformed;
- preference inference: `{"toSave": []}`.

What it did is counted in `ChaosLLM.counts`.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import _repo_root  # noqa: F401  (puts the repo root on sys.path for tests.harness)

from tests.harness.adversary import parse_prompt

ENRICH_PREFIX = "You turn a raw note"
CONSOLIDATE_PREFIX = "You maintain an AI agent's long-term memory"
REPAIR_MARKER = "dropped details"
PREFERENCE_MARKER = "infer lasting preferences"

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_EMAIL = re.compile(r"\s*[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+")
_PHONE = re.compile(r"\s*\+\d{1,3} \d{3}-\d{3}-\d{4}")
_CLAUSES = [
    re.compile(p)
    for p in (
        r"\s+since \d{4}",
        r"\s+on \d{4}-\d{2}-\d{2}",
        r",\s+due [A-Z][a-z]+ \d{1,2}, \d{4}",
        r"\s+in [A-Z][a-z]+",
        r"\s*\b\d{2,}\b",
    )
]
MALFORMED = ["{not json", '[{"content": "half a reply', "Sure! Here is what I found:", "null"]


@dataclass(frozen=True)
class Chaos:
    """Probabilities of each misbehaviour, per request (0 disables it)."""

    delay: float = 0.35
    delay_seconds: tuple[float, float] = (0.5, 3.0)
    server_error: float = 0.10
    malformed: float = 0.07
    lossy_enrichment: float = 0.15
    lossy_merge: float = 0.25
    sources_in_delete: float = 0.5
    unshown_id: float = 0.25
    chatter_prune: float = 0.7
    ordinary_prune: float = 0.01


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def guess_category(sentence: str) -> str:
    if "@" in sentence or "phone" in sentence:
        return "people/contacts"
    if " work" in sentence:
        return "people/work"
    if sentence.startswith(("Met ", "I met ")):
        return "events"
    if sentence.startswith("Project "):
        return "projects"
    return "status"


def lossy(text: str, rng: random.Random) -> str:
    """The text less an e-mail or a phone, else less one clause carrying a specific (a
    year, a date, a place, a number); unchanged only when it has none of those."""
    for pattern in [*rng.sample([_EMAIL, _PHONE], 2), *_CLAUSES]:
        if pattern.search(text):
            return pattern.sub("", text, count=1)
    return text


class ChaosLLM:
    def __init__(self, seed: int, chaos: Chaos | None = None) -> None:
        self.seed = seed
        self.chaos = chaos or Chaos()
        self.counts: Counter[str] = Counter()
        self._calls = 0
        self._lock = threading.Lock()
        self._seen_ids: deque[str] = deque(maxlen=500)  # ids shown in earlier prompts
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.counts[what] += n

    def _rng(self, body: dict) -> random.Random:
        with self._lock:
            self._calls += 1
            call = self._calls
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        return random.Random(f"{self.seed}:{call}:{digest}")

    # -- the reply to one request: (HTTP status, assistant content) --------------------

    def answer(self, body: dict, *, sleep=time.sleep) -> tuple[int, str]:
        rng = self._rng(body)
        messages = body.get("messages") or [{}, {}]
        system = messages[0].get("content", "")
        user = messages[-1].get("content", "")
        kind = self._kind(system) if body else "truncated"  # a sender killed mid-request
        self._count(f"{kind} requests")
        c = self.chaos
        if rng.random() < c.delay:
            self._count("delayed replies")
            sleep(rng.uniform(*c.delay_seconds))
        if rng.random() < c.server_error:
            self._count("HTTP 500 replies")
            return 500, "chaos: internal error"
        if kind not in ("unknown", "truncated") and rng.random() < c.malformed:
            self._count("malformed replies")
            return 200, rng.choice(MALFORMED)
        if kind == "enrichment":
            return 200, self._enrich(user, rng)
        if kind == "consolidation":
            return 200, self._consolidate(user, rng)
        if kind == "repair":
            return 200, self._repair(system, user, rng)
        if kind == "preferences":
            return 200, json.dumps({"toSave": []})
        return 400, "chaos: unknown prompt"

    @staticmethod
    def _kind(system: str) -> str:
        if system.startswith(ENRICH_PREFIX):
            return "enrichment"
        if system.startswith(CONSOLIDATE_PREFIX):
            return "consolidation"
        if REPAIR_MARKER in system:
            return "repair"
        if PREFERENCE_MARKER in system:
            return "preferences"
        return "unknown"

    def _enrich(self, note: str, rng: random.Random) -> str:
        parts = sentences(note) or [note]
        if rng.random() < self.chaos.lossy_enrichment:
            self._count("lossy enrichments")
            if len(parts) > 1 and not any(_EMAIL.search(p) or _PHONE.search(p) for p in parts):
                drop = rng.randrange(len(parts))
                parts = [p for i, p in enumerate(parts) if i != drop]
            else:
                i = next(
                    (i for i, p in enumerate(parts) if _EMAIL.search(p) or _PHONE.search(p)),
                    rng.randrange(len(parts)),
                )
                parts[i] = lossy(parts[i], rng)
        facts = [
            {"content": p, "category": guess_category(p), "tags": [], "importance": 0.5}
            for p in parts
        ]
        return json.dumps(facts)

    def _foreign_id(self, shown: Iterable[str], rng: random.Random) -> str:
        shown = set(shown)
        with self._lock:
            earlier = [i for i in self._seen_ids if i not in shown]
        if earlier and rng.random() < 0.6:
            return rng.choice(earlier)
        return f"{rng.getrandbits(48):012x}"

    def _consolidate(self, prompt: str, rng: random.Random) -> str:
        c = self.chaos
        shown, hints = parse_prompt(prompt)
        by_id = {s.id: s for s in shown}
        to_save, to_delete, used = [], [], set()
        for group in hints:
            members = [by_id[i] for i in group if i in by_id and i not in used]
            if len(members) < 2:
                continue
            roll = rng.random()
            if roll < 0.25:
                continue  # left alone
            text = " ".join(dict.fromkeys(s for m in members for s in sentences(m.content)))
            if roll < 0.25 + c.lossy_merge:
                self._count("lossy merges")
                text = lossy(text, rng)
            else:
                self._count("honest merges")
            ids = [m.id for m in members]
            used.update(ids)
            to_save.append(
                {"content": text, "category": members[0].category, "tags": [], "sourceIds": ids}
            )
            if rng.random() < c.sources_in_delete:
                self._count("merge sources listed in toDelete")
                to_delete += ids
        for s in shown:
            if s.category == "status" and rng.random() < c.chatter_prune:
                self._count("prunes of chatter")
                to_delete.append(s.id)
            elif s.category != "status" and rng.random() < c.ordinary_prune:
                self._count("prunes of ordinary entries")
                to_delete.append(s.id)
        if shown and rng.random() < c.unshown_id:
            self._count("ids not shown")
            foreign = self._foreign_id(by_id, rng)
            to_delete.append(foreign)
            if to_save:
                to_save[0]["sourceIds"].append(foreign)
        with self._lock:
            self._seen_ids.extend(by_id)
        return json.dumps({"toDelete": to_delete, "toSave": to_save})

    def _repair(self, system: str, user: str, rng: random.Random) -> str:
        merged = user.rsplit("Merged text:\n", 1)[-1]
        missing = system.split("verbatim: ", 1)[-1].split(". Reply", 1)[0]
        roll = rng.random()
        if roll < 0.5:
            self._count("honest repairs")
            return json.dumps({"content": f"{merged} ({missing})"})
        if roll < 0.8:
            self._count("lossy repairs")
            return json.dumps({"content": merged})
        self._count("malformed repairs")
        return rng.choice(MALFORMED)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        # A worker SIGKILLed mid-request leaves a broken socket: expected here, not news.
        pass


def _handler(llm: ChaosLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            try:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            except (ValueError, TypeError, KeyError):
                body = {}
            status, content = llm.answer(body)
            payload = (
                {"choices": [{"message": {"role": "assistant", "content": content}}]}
                if status == 200
                else {"error": content}
            )
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
