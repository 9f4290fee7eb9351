"""The wire protocol between the edge and the server, and the transports that speak it."""
