"""A PostgreSQL store (``postgresql://USER@HOST/DB``, the ``[postgres]`` extra,
psycopg 3), for many workers writing at once; the table ``tensorgauge_meta``
carries the schema version. Each write is its own transaction. SQL is written
with ``?`` placeholders, as for SQLite."""

from __future__ import annotations

import re

from tensorgauge.errors import StoreError
from tensorgauge.store import schema
from tensorgauge.store.location import local_data_dir
from tensorgauge.store.sqlite import check_version

TYPES = {"blob": "BYTEA", "real": "DOUBLE PRECISION", "int": "BIGINT", "event_id": "id BIGSERIAL PRIMARY KEY, ",
         "event_order": "run_id, id"}


SECRET_PARAMETERS = ("password", "sslpassword", "sslkey", "passfile", "sslcert", "sslrootcert", "sslcrl")


def _user_password(url: str) -> tuple[int, int] | None:
    """Where the password of ``scheme://user:password@host`` lies in ``url``: from the first ':' after the
    scheme to the *last* '@', so that a password holding '@', '/' or ':' is all of it (libpq would stop
    at its first '@' or '/', and name the rest as a host or a database in its message)."""
    start = url.find("://")
    if start < 0:
        return None
    start += 3
    at = url.rfind("@")
    colon = url.find(":", start, at if at >= 0 else start)
    return (colon + 1, at) if at > start and colon >= 0 else None


def secrets(url: str) -> list[str]:
    """Every spelling of a secret ``url`` holds, longest first: its password as written, percent-decoded,
    and in the pieces libpq may cut it into ('@', '/', ':'), and the value of every secret parameter
    (whatever the spelling of its name: libpq's own parser, psycopg's ``conninfo_to_dict``, reads them)."""
    from urllib.parse import unquote

    found = []
    where = _user_password(url)
    if where:
        found.append(url[where[0]:where[1]])
    names = "|".join(SECRET_PARAMETERS)
    found += re.findall(rf"(?i)[?&](?:{names})=([^&#]*)", url)
    try:
        from psycopg.conninfo import conninfo_to_dict

        found += [str(v) for k, v in conninfo_to_dict(url).items() if k in SECRET_PARAMETERS and v]
    except Exception:  # psycopg missing, or a URL libpq does not take: what is found above
        pass
    spellings = set()
    for secret in found:
        spellings |= {secret, unquote(secret), *re.split(r"[@/:?#&]", secret)}
    return sorted((s for s in spellings if len(s) >= 3 and s != "***"), key=len, reverse=True)


def redact(url: str) -> str:
    """The URL without its secrets, for messages: the password in the user part, and the value of every
    parameter that holds a secret or names where one is kept (``password=``, ``sslpassword=``...)."""
    where = _user_password(url)
    masked = url[:where[0]] + "***" + url[where[1]:] if where else url
    names = "|".join(SECRET_PARAMETERS)
    masked = re.sub(rf"(?i)([?&](?:{names})=)[^&#]*", r"\1***", masked)
    for secret in secrets(url):  # spelt another way (percent-encoded, in the path): not shown at all
        masked = masked.replace(secret, "***")
    return masked


def scrub(text: str, url: str) -> str:
    """``text`` (libpq's message, which may quote the URL or a piece of it) with no secret of ``url`` in it."""
    text = text.replace(url, redact(url))
    for secret in secrets(url):
        text = text.replace(secret, "***")
    return text


class PostgresBackend:
    event_order = "id"
    chunked = True
    read_only = False

    def __init__(self, url: str, create: bool):
        try:
            import psycopg
        except ImportError:
            raise StoreError("a PostgreSQL store needs the [postgres] extra: pip install 'tensorgauge[postgres]'") \
                from None
        self.errors = (psycopg.Error,)
        self._url = url
        self.location = redact(url)  # never print a password
        self.data_dir = local_data_dir()  # checkpoints and reports stay on this machine
        try:
            self.conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {self.location}: {self.scrub(exc)}") from None
        try:
            with self.conn.transaction():
                self.conn.execute("SELECT pg_advisory_xact_lock(7457)")  # one creator at a time
                self.conn.execute("CREATE TABLE IF NOT EXISTS tensorgauge_meta (key TEXT PRIMARY KEY, value TEXT)")
                row = self.conn.execute("SELECT value FROM tensorgauge_meta WHERE key = 'schema_version'").fetchone()
                version = int(row[0]) if row else 0
                check_version(version, self.location)
                if version == 0:
                    if not create:
                        raise StoreError(f"no run store at {self.location} (record a run with 'tensorgauge run')")
                    steps = schema.create_statements(TYPES)
                else:
                    steps = schema.added_in_3(TYPES) if version < 3 else []
                    for table in schema.TABLE_COLUMNS:
                        present = {r[0] for r in self.conn.execute(
                            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                            "AND table_schema = current_schema()", (table,)).fetchall()}
                        steps += schema.missing_columns(table, present, TYPES)
                    indexes = {r[0] for r in self.conn.execute(
                        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()").fetchall()}
                    steps += schema.missing_indexes(indexes, TYPES)
                for statement in steps:
                    self.conn.execute(statement)
                self.conn.execute("INSERT INTO tensorgauge_meta VALUES ('schema_version', %s) ON CONFLICT (key) "
                                  "DO UPDATE SET value = excluded.value", (str(schema.SCHEMA_VERSION),))
        except psycopg.Error as exc:
            raise StoreError(f"store {self.location} is not usable ({self.scrub(exc)})") from None

    def scrub(self, exc: BaseException) -> str:
        """The first line of a psycopg error, without the store's secrets."""
        lines = str(exc).strip().splitlines()
        return scrub(lines[0] if lines else type(exc).__name__, self._url)

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        return self.conn.execute(self._sql(sql), args).fetchall()

    def execute(self, sql: str, args: tuple = ()) -> int:
        """Runs ``sql``; returns the number of rows it changed."""
        return self.conn.execute(self._sql(sql), args).rowcount

    def executemany(self, sql: str, rows: list[tuple]) -> None:
        with self.conn.cursor() as cursor:
            cursor.executemany(self._sql(sql), rows)

    def transaction(self):
        return self.conn.transaction()

    def connection_lost(self) -> bool:
        """The server closed the connection (restarted, or the link went down)."""
        return bool(self.conn.closed or self.conn.broken)

    def reconnect(self) -> bool:
        """A new connection, once the server answers again; False while it does not."""
        import psycopg

        try:
            conn = psycopg.connect(self._url, autocommit=True, connect_timeout=2)
        except psycopg.Error:
            return False
        old, self.conn = self.conn, conn
        try:
            old.close()
        except psycopg.Error:
            pass
        return True

    def close(self) -> None:
        self.conn.close()
