"""The built-in source formats, one module each, found by name through sources/registry.py."""
