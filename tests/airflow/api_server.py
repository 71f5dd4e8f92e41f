"""An ASGI app (Airflow's own API server app, or the dashboard mounted the way Airflow mounts it) served on a
free loopback port from a thread of the test process, so it shares the session's Airflow database."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mirrorflow.local.process import free_ports


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve `app`; yields its base URL (`http://127.0.0.1:<port>`) and stops it on exit."""
    import uvicorn

    (port,) = free_ports(1)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
