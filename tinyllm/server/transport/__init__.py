"""Transport: request bodies (size, nesting, parsing), the per-request limits, slow clients, the Host
allow-list, and a server thread on a loopback port."""
