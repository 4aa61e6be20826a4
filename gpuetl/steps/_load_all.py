"""Import every step module once so each registers itself."""

from . import cast, dedupe, derive, drop, filter, rename, select  # noqa: F401
