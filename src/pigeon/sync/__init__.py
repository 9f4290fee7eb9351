"""Scheduler and executor of the edge: when to sync, and how to send in order."""
