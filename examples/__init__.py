"""Example applications built on pigeon (importable from the repository's root)."""
