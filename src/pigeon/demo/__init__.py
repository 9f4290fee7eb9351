"""The end-to-end demo: an offline editing session synced through a faulty network."""
