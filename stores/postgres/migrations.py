"""The database schema, as versioned migrations applied in order by `dreamkeeper db
upgrade` (`upgrade`). A worker checks the version at start (`check_schema`) and refuses a
database older or newer than its code, with a plain message, rather than failing on the
first query that meets a missing column.

A migration is never edited once released: a change is a new migration. Each runs in one
transaction together with the row recording it, so a crash leaves it applied or not.
Concurrent upgrades serialize on an advisory lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamkeeper.core.errors import SettingsError
from dreamkeeper.stores.postgres.database import Database

# pg_advisory_lock key of `upgrade` ("dk" + "schema" as a number: any constant unique to us).
UPGRADE_LOCK = 0x646B_5343_4845_4D41


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "store identity",
        """
        CREATE TABLE dreamkeeper_store (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            store_id text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        );
        INSERT INTO dreamkeeper_store (store_id)
        VALUES (substr(replace(gen_random_uuid()::text, '-', ''), 1, 16));
        """,
    ),
    Migration(
        2,
        "long-term memory",
        # Entries are whole JSON documents (`doc`, the entry's compact camelCase JSON), so
        # a field added to MemoryEntry passes through with no migration; the other columns
        # are only what the store queries or checks in SQL. `dk_memory_agent.feed_seq` is
        # the agent's change-feed counter: raised in every write's transaction, its row
        # lock orders the commits, so a reader never sees seq n+1 without seq n.
        """
        CREATE TABLE dk_memory_agent (
            agent_id text PRIMARY KEY,
            feed_seq bigint NOT NULL DEFAULT 0
        );
        CREATE TABLE dk_memory (
            agent_id text NOT NULL,
            id text NOT NULL,
            revision integer NOT NULL,
            category text,
            archived_at timestamptz,
            fingerprint text NOT NULL,
            seq bigint NOT NULL,
            doc text NOT NULL,
            PRIMARY KEY (agent_id, id)
        );
        CREATE TABLE dk_memory_feed (
            agent_id text NOT NULL,
            seq bigint NOT NULL,
            at timestamptz NOT NULL,
            action text NOT NULL,
            id text NOT NULL,
            category text,
            fingerprint text,
            rev integer,
            op text,
            reason text,
            PRIMARY KEY (agent_id, seq)
        );
        CREATE TABLE dk_memory_vector (
            agent_id text NOT NULL,
            id text NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (agent_id, id)
        );
        CREATE TABLE dk_memory_cache (
            agent_id text NOT NULL,
            name text NOT NULL,
            seq bigint NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (agent_id, name)
        );
        ALTER TABLE dk_memory_cache ALTER COLUMN data SET STORAGE EXTERNAL;
        """,
    ),
    Migration(
        3,
        "agent documents, working memory, conversations",
        """
        -- An agent's documents (dream ledgers, cluster state, settings, the conversation
        -- log): a document is its rows in `seq` order; `write` replaces them with one row,
        -- `append` adds one, so an append is atomic and never torn.
        CREATE TABLE dreamkeeper_documents (
            agent_id text NOT NULL,
            name text NOT NULL,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            data bytea NOT NULL,
            written_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            PRIMARY KEY (agent_id, name, seq)
        );

        -- Working memory: one row per key; the agent's row in dreamkeeper_working_agents
        -- is every writer's lock and the version readers compare to see a change.
        CREATE TABLE dreamkeeper_working_agents (
            agent_id text PRIMARY KEY,
            version bigint NOT NULL
        );
        CREATE TABLE dreamkeeper_working (
            agent_id text NOT NULL,
            key text NOT NULL,
            expires_at timestamptz NOT NULL,
            entry text NOT NULL,
            PRIMARY KEY (agent_id, key)
        );
        CREATE TABLE dreamkeeper_working_vectors (
            agent_id text NOT NULL,
            key text NOT NULL,
            vector bytea NOT NULL,
            PRIMARY KEY (agent_id, key)
        );

        -- Conversations: a session row (locked by each turn's writer) and its turns; the
        -- window and the archive are the newest turns by number.
        CREATE TABLE dreamkeeper_conversation_sessions (
            agent_id text NOT NULL,
            session_id text NOT NULL,
            started_at timestamptz NOT NULL,
            last_at timestamptz NOT NULL,
            next_n bigint NOT NULL,
            PRIMARY KEY (agent_id, session_id)
        );
        CREATE TABLE dreamkeeper_conversation_turns (
            agent_id text NOT NULL,
            session_id text NOT NULL,
            n bigint NOT NULL,
            turn text NOT NULL,
            PRIMARY KEY (agent_id, session_id, n)
        );
        """,
    ),
    Migration(
        4,
        "forget journal",
        """
        -- Forget requests (stores.forget): ids and scopes only, never content; a request
        -- with no `done` row was interrupted and is finished by the next forget.
        CREATE TABLE dreamkeeper_forget_journal (
            seq bigserial PRIMARY KEY,
            request text NOT NULL,
            record text NOT NULL
        );
        """,
    ),
    Migration(
        5,
        "access tokens",
        """
        CREATE TABLE dreamkeeper_tokens (
            token_id text PRIMARY KEY,
            record text NOT NULL
        );
        """,
    ),
    Migration(
        6,
        "agent data keys",
        """
        -- Per-agent payload data keys (stores.postgres.agent_keys), only ever wrapped by a
        -- payload key. At most one current key per agent: the unique index is what makes
        -- two first uses at once agree on one key. Others (carried from a data directory
        -- by `migrate`) only open the payloads they sealed.
        CREATE TABLE dreamkeeper_agent_keys (
            agent_id text NOT NULL,
            key_id text NOT NULL,
            wrapped_by text NOT NULL,
            nonce bytea NOT NULL,
            wrapped bytea NOT NULL,
            current boolean NOT NULL,
            made_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (agent_id, key_id)
        );
        CREATE UNIQUE INDEX dreamkeeper_agent_keys_current
            ON dreamkeeper_agent_keys (agent_id) WHERE current;
        -- Ids of keys `forget` destroyed, so a decoder says "erased", not "unknown key":
        -- no agent id, no key material.
        CREATE TABLE dreamkeeper_destroyed_keys (
            key_id text PRIMARY KEY,
            destroyed_at timestamptz NOT NULL DEFAULT now()
        );
        """,
    ),
    Migration(
        7,
        "idle marks",
        # One row per agent found idle by the dream idle check (stores.postgres.idle_marks):
        # the state the decision rested on and until when it holds; counts and times, never
        # content. It goes with the agent's counter row (a whole-agent forget deletes it),
        # so a store made again under the same agent id never meets an old mark.
        """
        CREATE TABLE dk_idle_mark (
            agent_id text PRIMARY KEY
                REFERENCES dk_memory_agent (agent_id) ON DELETE CASCADE,
            state text NOT NULL,
            until timestamptz,
            live integer NOT NULL,
            held_back integer NOT NULL
        );
        """,
    ),
    Migration(
        8,
        "access tokens issued mark",
        # Set with the first token (stores.postgres.tokens) and never cleared by
        # Dreamkeeper: an emptied or damaged token table then keeps every server closed.
        # A database that already has tokens is marked now.
        """
        ALTER TABLE dreamkeeper_store ADD COLUMN tokens_issued_at timestamptz;
        UPDATE dreamkeeper_store SET tokens_issued_at = now()
        WHERE EXISTS (SELECT 1 FROM dreamkeeper_tokens);
        """,
    ),
    Migration(
        9,
        "store epochs",
        # The agent store's identity (docs/storage.md, store epochs): a whole-agent forget
        # deletes the counter row and the next write makes a new one, so the feed starts
        # again at 1 under a new epoch. Random, not a sequence: a database restored from
        # an older backup must not hand out an epoch a running process has seen.
        """
        ALTER TABLE dk_memory_agent ADD COLUMN epoch uuid NOT NULL DEFAULT gen_random_uuid();
        """,
    ),
    Migration(
        10,
        "content sealed at rest, key-encryption keys",
        # docs/storage.md, erasure on PostgreSQL. The KEKs themselves live in a keyring
        # file outside the database; this lists their ids (one current), and every data
        # key names the KEK that wraps it, so a KEK cannot be delisted while a data key
        # still needs it. Keys made before this migration were wrapped by the payload key
        # itself: `ever_under_payload_key` remembers that, for the receipt of a forget
        # (copies of them wrapped that way may still lie in old WAL and dead tuples).
        #
        # Every sealed row names the data key it is sealed with, a foreign key into the
        # agent's keys: the database refuses to delete a key while a row still needs it,
        # and refuses a row sealed with a key already deleted. A tier's key is in the row
        # its writers lock (the agent's counter row, the working-memory agent row, the
        # session row); documents name theirs per row. Sealed values are incompressible:
        # stored EXTERNAL, never run through compression.
        """
        CREATE TABLE dreamkeeper_keks (
            kek_id text PRIMARY KEY,
            current boolean NOT NULL DEFAULT false,
            listed_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE UNIQUE INDEX dreamkeeper_keks_current ON dreamkeeper_keks (current) WHERE current;
        -- KEKs a rotation delisted (ids only): a process that finds one still in the
        -- keyring file (a rotation cut short) erases it there. One neither listed nor
        -- retired is left alone: it wraps nothing here, and may be what a newer state of
        -- this database needs (one restored from an older backup knows less).
        CREATE TABLE dreamkeeper_retired_keks (
            kek_id text PRIMARY KEY,
            retired_at timestamptz NOT NULL DEFAULT now()
        );

        ALTER TABLE dreamkeeper_agent_keys
            ADD COLUMN kek_id text REFERENCES dreamkeeper_keks (kek_id),
            ADD COLUMN ever_under_payload_key boolean NOT NULL DEFAULT true;
        ALTER TABLE dreamkeeper_agent_keys ALTER COLUMN ever_under_payload_key SET DEFAULT false;

        ALTER TABLE dk_memory_agent
            ADD COLUMN key_id text,
            ADD FOREIGN KEY (agent_id, key_id) REFERENCES dreamkeeper_agent_keys (agent_id, key_id);
        ALTER TABLE dk_memory
            ALTER COLUMN doc DROP NOT NULL,
            ALTER COLUMN fingerprint DROP NOT NULL,
            ADD COLUMN sealed bytea,
            ADD COLUMN key_id text,
            ADD CHECK ((doc IS NULL) = (sealed IS NOT NULL)),
            ADD CHECK ((sealed IS NULL) = (key_id IS NULL)),
            ADD FOREIGN KEY (agent_id, key_id) REFERENCES dreamkeeper_agent_keys (agent_id, key_id);
        ALTER TABLE dk_memory ALTER COLUMN sealed SET STORAGE EXTERNAL;
        ALTER TABLE dk_memory_vector
            ADD COLUMN key_id text,
            ADD FOREIGN KEY (agent_id, key_id) REFERENCES dreamkeeper_agent_keys (agent_id, key_id);
        ALTER TABLE dk_memory_vector ALTER COLUMN data SET STORAGE EXTERNAL;
        ALTER TABLE dk_memory_cache
            ADD COLUMN key_id text,
            ADD FOREIGN KEY (agent_id, key_id) REFERENCES dreamkeeper_agent_keys (agent_id, key_id);

        ALTER TABLE dreamkeeper_documents
            ADD COLUMN key_id text,
            ADD FOREIGN KEY (agent_id, key_id) REFERENCES dreamkeeper_agent_keys (agent_id, key_id);
        ALTER TABLE dreamkeeper_documents ALTER COLUMN data SET STORAGE EXTERNAL;

        ALTER TABLE dreamkeeper_working_agents
            ADD COLUMN key_id text,
            ADD FOREIGN KEY (agent_id, key_id) REFERENCES dreamkeeper_agent_keys (agent_id, key_id);
        ALTER TABLE dreamkeeper_working
            ALTER COLUMN entry DROP NOT NULL,
            ADD COLUMN sealed bytea,
            ADD COLUMN segment text,
            ADD COLUMN key_id text,
            ADD CHECK ((entry IS NULL) = (sealed IS NOT NULL)),
            ADD CHECK ((sealed IS NULL) = (key_id IS NULL)),
            ADD FOREIGN KEY (agent_id, key_id) REFERENCES dreamkeeper_agent_keys (agent_id, key_id);
        ALTER TABLE dreamkeeper_working_vectors
            ADD COLUMN key_id text,
            ADD FOREIGN KEY (agent_id, key_id) REFERENCES dreamkeeper_agent_keys (agent_id, key_id);

        ALTER TABLE dreamkeeper_conversation_sessions
            ADD COLUMN key_id text,
            ADD FOREIGN KEY (agent_id, key_id) REFERENCES dreamkeeper_agent_keys (agent_id, key_id);
        ALTER TABLE dreamkeeper_conversation_turns
            ALTER COLUMN turn DROP NOT NULL,
            ADD COLUMN sealed bytea,
            ADD COLUMN key_id text,
            ADD CHECK ((turn IS NULL) = (sealed IS NOT NULL)),
            ADD CHECK ((sealed IS NULL) = (key_id IS NULL)),
            ADD FOREIGN KEY (agent_id, key_id) REFERENCES dreamkeeper_agent_keys (agent_id, key_id);
        """,
    ),
    Migration(
        11,
        "change notifications",
        # stores/postgres/change_watch.py: every write to a tier's counter row or rows
        # sends NOTIFY dreamkeeper_change '<tier>:<agent_id>' from its own transaction, so
        # it is delivered only if it commits; a warm read with no notification for its
        # agent skips its "did anything change?" query. Identical payloads of one
        # transaction are folded into one by PostgreSQL. Triggers, not the writers' code,
        # so a write from any path (forget, re-key, an older process) is never silent.
        # Long-term memory needs only its counter row: every write raises `feed_seq` in its
        # transaction, and the catch-up reads nothing past it (a trigger per feed row
        # would run 1,000 times per bulk chunk for one notification).
        """
        CREATE FUNCTION dk_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' THEN
                PERFORM pg_notify('dreamkeeper_change', TG_ARGV[0] || ':' || OLD.agent_id);
                RETURN OLD;
            END IF;
            PERFORM pg_notify('dreamkeeper_change', TG_ARGV[0] || ':' || NEW.agent_id);
            IF TG_OP = 'UPDATE' AND OLD.agent_id IS DISTINCT FROM NEW.agent_id THEN
                PERFORM pg_notify('dreamkeeper_change', TG_ARGV[0] || ':' || OLD.agent_id);
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER dk_change AFTER INSERT OR UPDATE OR DELETE ON dk_memory_agent
            FOR EACH ROW EXECUTE FUNCTION dk_notify_change('memory');
        CREATE TRIGGER dk_change AFTER INSERT OR UPDATE OR DELETE ON dreamkeeper_working_agents
            FOR EACH ROW EXECUTE FUNCTION dk_notify_change('working');
        CREATE TRIGGER dk_change AFTER INSERT OR UPDATE OR DELETE ON dreamkeeper_working
            FOR EACH ROW EXECUTE FUNCTION dk_notify_change('working');
        CREATE TRIGGER dk_change AFTER INSERT OR UPDATE OR DELETE
            ON dreamkeeper_conversation_sessions
            FOR EACH ROW EXECUTE FUNCTION dk_notify_change('conversation');
        CREATE TRIGGER dk_change AFTER INSERT OR UPDATE OR DELETE
            ON dreamkeeper_conversation_turns
            FOR EACH ROW EXECUTE FUNCTION dk_notify_change('conversation');
        """,
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version

_SCHEMA_TABLE = """
CREATE TABLE IF NOT EXISTS dreamkeeper_schema (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


def current_version(db: Database) -> int:
    """The highest migration applied (0 for a database Dreamkeeper never upgraded)."""
    with db.transaction() as conn:
        exists = conn.execute("SELECT to_regclass('dreamkeeper_schema') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return 0
        row = conn.execute("SELECT coalesce(max(version), 0) FROM dreamkeeper_schema").fetchone()
        return int(row[0]) if row else 0


def upgrade(db: Database) -> list[Migration]:
    """Apply every migration the database lacks, in order; returns those applied now."""
    applied: list[Migration] = []
    with db.dedicated() as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (UPGRADE_LOCK,))
        try:
            conn.execute(_SCHEMA_TABLE)
            row = conn.execute(
                "SELECT coalesce(max(version), 0) FROM dreamkeeper_schema"
            ).fetchone()
            have = int(row[0]) if row else 0
            if have > SCHEMA_VERSION:
                raise newer_than_code(db, have)
            for migration in MIGRATIONS:
                if migration.version <= have:
                    continue
                with conn.transaction():
                    conn.execute(migration.sql)
                    conn.execute(
                        "INSERT INTO dreamkeeper_schema (version, name) VALUES (%s, %s)",
                        (migration.version, migration.name),
                    )
                applied.append(migration)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (UPGRADE_LOCK,))
    return applied


def newer_than_code(db: Database, have: int) -> SettingsError:
    return SettingsError(
        f"the database at {db.location} has schema version {have}, newer than this "
        f"Dreamkeeper's {SCHEMA_VERSION}: upgrade Dreamkeeper (or point "
        "DREAMKEEPER_DATABASE_URL at another database)"
    )


def check_schema(db: Database) -> None:
    """Raise `SettingsError` with what to do unless the schema is exactly this code's."""
    have = current_version(db)
    if have > SCHEMA_VERSION:
        raise newer_than_code(db, have)
    if have < SCHEMA_VERSION:
        state = "has no Dreamkeeper schema" if have == 0 else f"has schema version {have}"
        raise SettingsError(
            f"the database at {db.location} {state}; this Dreamkeeper needs version "
            f"{SCHEMA_VERSION}: run `dreamkeeper db upgrade`"
        )
