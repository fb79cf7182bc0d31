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


def redact(url: str) -> str:
    """The URL without its secrets, for messages: the password in the user part, and the value of every
    parameter that holds a secret or names where one is kept (``password=``, ``sslpassword=``...), as
    libpq's own parser reads them (psycopg's ``conninfo_to_dict``): whatever the spelling, it is masked."""
    url = re.sub(r"//([^:@/]*):[^@/]*@", r"//\1:***@", url)
    try:
        from psycopg.conninfo import conninfo_to_dict

        secrets = {k: v for k, v in conninfo_to_dict(url).items() if k in SECRET_PARAMETERS and v}
    except Exception:  # psycopg missing, or a URL libpq does not take: mask each parameter named so
        secrets = {}
    names = "|".join(SECRET_PARAMETERS)
    url = re.sub(rf"(?i)([?&](?:{names})=)[^&#]*", r"\1***", url)
    for value in secrets.values():  # spelt another way (percent-encoded, in the path): not shown at all
        if str(value) != "***" and len(str(value)) >= 3:
            url = url.replace(str(value), "***")
    return url


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
            raise StoreError(f"cannot connect to {self.location}: {str(exc).strip().splitlines()[0]}") from None
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
            raise StoreError(f"store {self.location} is not usable ({str(exc).strip().splitlines()[0]})") from None

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
