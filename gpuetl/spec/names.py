"""Names gpuetl keeps for itself, so no user name can replace its columns or folders.

gpuetl's bookkeeping columns inside a partition start with `__` (gpuetl/columns.py: `__fi`,
`__st`, ...); the columns it adds to what it writes are `ADDED`; its folders in a dataset start
with `_` (`_quarantine`, `_tmp`). So: a name starting with `__` is never a column; a name a user
makes up (a split, a derive or rename target, a regex group, a template field) does not start with
`_`; a field the input already has may (a MongoDB `_id`), unless it is one of `ADDED`.
"""

from __future__ import annotations

ADDED = ("_file", "_offset", "_extra", "_raw", "_reason", "_stage")


def field_name_problem(name: str) -> str | None:
    """Why an input field or `columns` entry cannot be a column, or None."""
    if name.startswith("__"):
        return f"{name!r}: names starting with '__' are reserved for gpuetl's bookkeeping columns"
    if name in ADDED:
        return f"{name!r} is a column gpuetl adds ({', '.join(ADDED)})"
    return None


def new_name_problem(name: str) -> str | None:
    """Why a name the pipeline file makes up (split, derive or rename target, regex group,
    template field) is refused, or None."""
    if name.startswith("_"):
        return f"{name!r}: names starting with '_' are reserved for the columns and folders gpuetl adds"
    return None
