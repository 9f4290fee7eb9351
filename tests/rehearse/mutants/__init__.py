"""Deliberately broken variants of the reference app, each with one fault a scenario of
``pigeon rehearse`` must find and name (tests/rehearse/test_mutants.py)."""
