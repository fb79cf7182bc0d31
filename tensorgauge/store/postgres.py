"""A PostgreSQL store (``postgresql://USER@HOST/DB``, the ``[postgres]`` extra,
psycopg 3), for many workers writing at once; the table ``tensorgauge_meta``
carries the schema version. Each write is its own transaction. SQL is written
with ``?`` placeholders, as for SQLite."""

from __future__ import annotations

import contextlib
import random
import threading
import time

from tensorgauge.errors import StoreError, StoreUnreachable
from tensorgauge.redaction import UrlSecrets
from tensorgauge.store import schema
from tensorgauge.store.location import local_data_dir
from tensorgauge.store.sqlite import check_version

TYPES = {"blob": "BYTEA", "real": "DOUBLE PRECISION", "int": "BIGINT", "event_id": "id BIGSERIAL PRIMARY KEY, ",
         "event_order": "run_id, id"}


SHIPPED_TABLE = "CREATE TABLE IF NOT EXISTS tensorgauge_shipped (run_id TEXT PRIMARY KEY, seq BIGINT NOT NULL)"
SECRET_PARAMETERS = ("password", "sslpassword", "sslkey", "passfile", "sslcert", "sslrootcert", "sslcrl")


class _LibpqSecrets(UrlSecrets):
    """A PostgreSQL URL's secrets: its password and secret parameters (the user name is no secret), and
    the value of every secret parameter whatever the spelling of its name (libpq's own parser, psycopg's
    ``conninfo_to_dict``, reads them)."""

    def found(self, url: str) -> list[str]:
        found = super().found(url)
        try:
            from psycopg.conninfo import conninfo_to_dict

            found += [str(v) for k, v in conninfo_to_dict(url).items() if k in SECRET_PARAMETERS and v]
        except Exception:  # psycopg missing, or a URL libpq does not take: what is found above
            pass
        return found


_SECRETS = _LibpqSecrets(parameters="|".join(SECRET_PARAMETERS), user=False)


def secrets(url: str) -> list[str]:
    """Every spelling of a secret ``url`` holds, longest first (:meth:`UrlSecrets.spellings`)."""
    return _SECRETS.spellings(url)


def redact(url: str) -> str:
    """The URL without its secrets, for messages: the password in the user part, and the value of every
    parameter that holds a secret or names where one is kept (``password=``, ``sslpassword=``...)."""
    return _SECRETS.redact(url)


def scrub(text: str, url: str) -> str:
    """``text`` (libpq's message, which may quote the URL or a piece of it) with no secret of ``url`` in it."""
    return _SECRETS.scrub(text, url)


# How the server (or the link to it) refuses a connection, told apart by what it answers: libpq gives no
# SQLSTATE for a failed connection, only the server's message. Worth waiting for: 53300 too_many_connections,
# 57P03 cannot_connect_now (starting, stopping, in recovery), 53xxx out of resources, and a server that does
# not answer at all. The user's to fix (fails fast): 28P01/28000 authentication, 3D000 no such database, a
# malformed URL, a host name that does not resolve.
# The server up and serving others (its connection slots taken) or about to be (starting).
_BUSY = ("too many clients", "remaining connection slots", "too many connections", "the database system is starting")
_TRANSIENT = (*_BUSY, "the database system is", "connection refused", "timeout expired", "timed out",
              "server closed the connection", "no route to host", "network is unreachable", "could not receive data", "out of memory",
              "could not fork", "terminating connection", "connection reset", "server is shutting down",
              "could not send data", "cannot connect now", "not currently accepting connections",
              "error response during ssl exchange")  # a refusal (starting, stopping) sent before TLS is agreed
_FATAL = ("password authentication failed", "authentication failed", "no pg_hba.conf entry", "does not exist",
          "permission denied", "invalid", "failed to resolve host", "could not translate host name", "ssl",
          "unsupported", "requires a password", "no password supplied")


_SLOW = ("timeout expired", "timed out")  # no answer in time: a server overloaded, or one gone from the network


def slow(text: str) -> bool:
    """Whether a refusal is a connection that timed out: the server did not finish answering in time."""
    return any(word in text.lower() for word in _SLOW)


def busy(text: str) -> bool:
    """Whether a refusal says the server is up and serving others (its connection slots taken) or about to
    be (starting): a transaction of ours will come, unlike from a server that does not answer."""
    return any(word in text.lower() for word in _BUSY)


def transient(exc: BaseException) -> bool:
    """Whether a failed connection is worth retrying (the server is busy, starting, or not answering)
    rather than the user's to fix (a wrong password, a missing database, a bad URL)."""
    text = str(exc).lower()
    if any(word in text for word in _TRANSIENT):
        return True
    if any(word in text for word in _FATAL):
        return False
    import psycopg

    return isinstance(exc, psycopg.OperationalError)  # a failure not named above: the job runs, data wait


def connect(url: str, timeout_seconds: int):
    """One autocommit connection with no session state and no server-side prepared statements
    (``prepare_threshold=None``): it works behind PgBouncer in transaction mode."""
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=timeout_seconds, prepare_threshold=None)


class PostgresBackend:
    """``hold=False`` (a recording): the connection is let go after each transaction, so a fleet of writers
    needs a connection only while one of them commits. Reading commands hold theirs (``hold=True``)."""

    event_order = "id"
    chunked = True
    read_only = False

    def __init__(self, url: str, create: bool, hold: bool = True, connect_seconds: int = 10,
                 connect_now: bool = True):
        try:
            import psycopg
        except ImportError:
            raise StoreError("a PostgreSQL store needs the [postgres] extra: pip install 'tensorgauge[postgres]'") \
                from None
        self.errors = (psycopg.Error,)
        self._url = url
        self.location = redact(url)  # never print a password
        self.data_dir = local_data_dir()  # checkpoints and reports stay on this machine
        self.hold, self._create, self.connect_seconds = hold, create, connect_seconds
        self._local = threading.local()  # each thread its own connection (the shipper's, the reader's)
        self._ready = False  # the schema checked (once per process)
        self.connections_made = 0
        if connect_now:
            self.open()

    @property
    def _conn(self):
        return getattr(self._local, "conn", None)

    @_conn.setter
    def _conn(self, conn) -> None:
        self._local.conn = conn

    @property
    def _depth(self) -> int:
        """Transactions open on this thread's connection."""
        return getattr(self._local, "depth", 0)

    @_depth.setter
    def _depth(self, depth: int) -> None:
        self._local.depth = depth

    def open(self) -> None:
        """Connect (and check or create the schema, the first time): :class:`StoreUnreachable` while the
        server refuses or does not answer, :class:`StoreError` for what the user must fix."""
        self._connection()
        if self._depth == 0:
            self.release()

    @property
    def conn(self):
        return self._connection()

    def _connection(self):
        import psycopg

        if self._conn is not None and not (self._conn.closed or self._conn.broken):
            return self._conn
        try:
            conn = connect(self._url, self.connect_seconds)
        except psycopg.Error as exc:
            said = f"cannot connect to {self.location}: {self.scrub(exc)}"
            raise (StoreUnreachable(said) if transient(exc) else StoreError(said)) from None
        self.connections_made += 1
        if not self._ready:
            try:
                self._prepare(conn)
            except psycopg.Error as exc:
                conn.close()
                if transient(exc):
                    raise StoreUnreachable(f"store {self.location} stopped answering: {self.scrub(exc)}") from None
                raise StoreError(f"store {self.location} is not usable ({self.scrub(exc)})") from None
            except BaseException:
                conn.close()
                raise
            self._ready = True
        self._conn = conn
        return conn

    def _prepare(self, conn) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(7457)")  # one creator at a time
            conn.execute("CREATE TABLE IF NOT EXISTS tensorgauge_meta (key TEXT PRIMARY KEY, value TEXT)")
            row = conn.execute("SELECT value FROM tensorgauge_meta WHERE key = 'schema_version'").fetchone()
            version = int(row[0]) if row else 0
            check_version(version, self.location)
            if version == 0:
                if not self._create:
                    raise StoreError(f"no run store at {self.location} (record a run with 'tensorgauge run')")
                steps = schema.create_statements(TYPES)
            else:
                steps = schema.added_in_3(TYPES) if version < 3 else []
                for table in schema.TABLE_COLUMNS:
                    present = {r[0] for r in conn.execute(
                        "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                        "AND table_schema = current_schema()", (table,)).fetchall()}
                    steps += schema.missing_columns(table, present, TYPES)
                indexes = {r[0] for r in conn.execute(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()").fetchall()}
                steps += schema.missing_indexes(indexes, TYPES)
            if self._create:  # what each spooled run has shipped: its batches go in once (store.shipping)
                steps.append(SHIPPED_TABLE)
            for statement in steps:
                conn.execute(statement)
            if steps or version != schema.SCHEMA_VERSION:
                conn.execute("INSERT INTO tensorgauge_meta VALUES ('schema_version', %s) ON CONFLICT (key) "
                             "DO UPDATE SET value = excluded.value", (str(schema.SCHEMA_VERSION),))

    @contextlib.contextmanager
    def session(self, wait_seconds: float = 0.0):
        """One connection for every query in the block, let go at its end (``hold=False`` otherwise
        connects for each); a server that refuses it (its slots taken, too busy to answer in time) is tried
        again for up to ``wait_seconds``."""
        self._depth += 1
        try:
            self._connect_waiting(wait_seconds)
            yield
        finally:
            self._depth -= 1
            self.release()

    def _connect_waiting(self, seconds: float) -> None:
        """Connect, trying again (1 s, then longer, with jitter) while the server refuses for a reason that
        passes (:func:`transient`); what the user must fix fails at once."""
        deadline, pause = time.monotonic() + seconds, 1.0
        while True:
            try:
                self._connection()
                return
            except StoreUnreachable:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(left, pause * random.uniform(0.5, 1.5)))
                pause = min(pause * 2, 4.0)

    def release(self) -> None:
        """Let go of the connection between writes (``hold=False``); the next use connects again."""
        if not self.hold and self._depth == 0 and self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.close()
            except Exception:  # already broken: nothing to let go of
                pass

    def scrub(self, exc: BaseException) -> str:
        """The first line of a psycopg error, without the store's secrets."""
        lines = str(exc).strip().splitlines()
        return scrub(lines[0] if lines else type(exc).__name__, self._url)

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            return self.conn.execute(self._sql(sql), args).fetchall()
        finally:
            self.release()

    def execute(self, sql: str, args: tuple = ()) -> int:
        """Runs ``sql``; returns the number of rows it changed."""
        try:
            return self.conn.execute(self._sql(sql), args).rowcount
        finally:
            self.release()

    def executemany(self, sql: str, rows: list[tuple]) -> None:
        try:
            with self.conn.cursor() as cursor:
                cursor.executemany(self._sql(sql), rows)
        finally:
            self.release()

    @contextlib.contextmanager
    def transaction(self):
        conn = self.conn
        self._depth += 1
        try:
            with conn.transaction():
                yield
        finally:
            self._depth -= 1
            self.release()

    def connection_lost(self) -> bool:
        """The server closed the connection (restarted, or the link went down)."""
        return bool(self._conn is None or self._conn.closed or self._conn.broken)

    def reconnect(self) -> bool:
        """A new connection, once the server answers again; False while it does not."""
        old, self._conn = self._conn, None
        if old is not None:
            try:
                old.close()
            except Exception:
                pass
        connect_seconds, self.connect_seconds = self.connect_seconds, 2
        try:
            self._connection()
        except StoreError:
            return False
        finally:
            self.connect_seconds = connect_seconds
        self.release()
        return True

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
