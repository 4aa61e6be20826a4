"""Import every step module once so each registers itself."""

from . import cast, dedupe, derive, drop, fill, filter, images, mask, near_dedupe, normalize_text, rename, select  # noqa: F401
