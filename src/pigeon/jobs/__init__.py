"""Accountable background work: queues, leases, workers, failed store, effects, schedules."""
