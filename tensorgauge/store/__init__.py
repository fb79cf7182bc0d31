"""Record: the run store (SQLite or PostgreSQL) and portable bundles.

Imports :mod:`tensorgauge.model` and the sources below it, never analysis or
rendering.
"""

from tensorgauge.store.location import STORE_ENV, default_store_path, is_url, local_data_dir
from tensorgauge.store.runs import Store
from tensorgauge.store.schema import SCHEMA_VERSION

__all__ = ["STORE_ENV", "SCHEMA_VERSION", "Store", "default_store_path", "is_url", "local_data_dir"]
