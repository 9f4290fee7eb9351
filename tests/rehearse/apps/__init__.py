"""Apps a rehearsal runs against besides the reference one, each with the hooks it needs."""
