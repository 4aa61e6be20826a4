"""Reading finished datasets into training batches (docs/consuming.md, "The Loader")."""

from .loader import Loader

__all__ = ["Loader"]
