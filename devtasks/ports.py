"""A free 127.0.0.1 port, for the test lanes, the fleet lab and the benchmarks (stdlib only)."""

import socket


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
