"""What the edge and the server share, and nothing that does I/O: the operation model,
retry policy and backoff, identifiers and path segments, the wire protocol's names and
its strict JSON decoder, hybrid logical clocks. Both halves import it; it imports neither
(`make lint` holds the layers)."""
