"""pigeon's Django management commands."""
