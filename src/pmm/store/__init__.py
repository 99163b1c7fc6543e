"""pmd's SQLite store (sqlite-utils, WAL), shared with `pmctl trend` and
`pmctl report`.

Its parts: `schema` (the tables, and the upgrade of an older pmd's
database), `rows` (the rows as dataclasses), `files` (where the database is,
its permissions, why it cannot be opened), `database` (`Store.open`),
`write`, `read` and `retention` (Store's methods by what they do), `errors`.
The names below are the store's API: import them from `pmm.store`.
"""

from pmm.store.database import Store
from pmm.store.errors import (
    BadRowError,
    DatabaseNotFound,
    DatabasePermissionDenied,
    NotADatabase,
    StoreError,
)
from pmm.store.files import SYSTEM_DB_PATH, db_group, default_db_path, user_db_path
from pmm.store.rows import (
    TICK_NS,
    AlertRow,
    ExitRecord,
    ExitSiteRow,
    ProcessRow,
    PruneStep,
    SampleRow,
    ScanRow,
    ScanSiteRow,
    Series,
    start_key,
)
from pmm.store.schema import PMD_TABLES, SAMPLE_HEAP_COLUMNS

__all__ = [
    "PMD_TABLES",
    "SAMPLE_HEAP_COLUMNS",
    "SYSTEM_DB_PATH",
    "TICK_NS",
    "AlertRow",
    "BadRowError",
    "DatabaseNotFound",
    "DatabasePermissionDenied",
    "ExitRecord",
    "ExitSiteRow",
    "NotADatabase",
    "ProcessRow",
    "PruneStep",
    "SampleRow",
    "ScanRow",
    "ScanSiteRow",
    "Series",
    "Store",
    "StoreError",
    "db_group",
    "default_db_path",
    "start_key",
    "user_db_path",
]
