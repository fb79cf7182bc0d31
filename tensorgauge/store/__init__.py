"""Record: the run store (SQLite or PostgreSQL) and portable bundles.

Imports :mod:`tensorgauge.model` and the sources below it, never analysis or
rendering.
"""

from tensorgauge.store.postgres import is_url
from tensorgauge.store.runs import STORE_ENV, Store, default_store_path, local_data_dir
from tensorgauge.store.schema import SCHEMA_VERSION

__all__ = ["STORE_ENV", "SCHEMA_VERSION", "Store", "default_store_path", "is_url", "local_data_dir"]
