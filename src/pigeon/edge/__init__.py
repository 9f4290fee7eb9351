"""The edge: an offline queue (storage), a scheduler and an executor (see pigeon.sync)."""
