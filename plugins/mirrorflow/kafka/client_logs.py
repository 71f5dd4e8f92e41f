"""librdkafka's log lines through Python logging, never raw on stderr.

Without a `logger` entry librdkafka writes `%3|1700000000.123|FAIL|rdkafka#producer-1| ...` straight to file
descriptor 2 from its own threads, where no Python code can filter or route it. With one, confluent-kafka maps
syslog levels to logging levels (0-2 CRITICAL, 3 ERROR, 4 WARNING, 5-6 INFO, 7 DEBUG) and queues the lines for
the client's poll: a producer's `poll()`/`flush()`, a consumer's `poll()`/`consume()`, an admin client's `poll()`.

A logger object cannot be pickled, so configs that travel (Spark tasks, XCom, spawned processes) stay plain
dicts; `with_logger` is applied where the client is created.

Admin clients are the awkward case: Mirrorflow never polls them (results come back as futures), so their lines
would pile up in the queue (unbounded, for a long-lived admin watching a dead broker) and vanish with the
client. `LoggedAdminClient` serves the queue before every admin call, when it is garbage-collected, and at exit.
"""

from __future__ import annotations

import atexit
import inspect
import logging
import types
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka.admin import AdminClient

from mirrorflow.kafka.callbacks import resolve_callbacks

LIBRDKAFKA_LOGGER = "mirrorflow.kafka.librdkafka"
librdkafka_log = logging.getLogger(LIBRDKAFKA_LOGGER)


def with_logger(settings: Mapping[str, Any]) -> dict[str, Any]:
    """`settings` plus Mirrorflow's librdkafka logger, unless the caller chose another one, and the callbacks
    the config names (`oauth_cb`...) made callable here (`mirrorflow.kafka.callbacks`)."""
    out = resolve_callbacks(settings)
    out.setdefault("logger", librdkafka_log)
    return out


_live_admins: weakref.WeakSet[LoggedAdminClient] = weakref.WeakSet()


def _serve(admin: AdminClient) -> None:
    try:
        AdminClient.poll(admin, 0)
    except Exception:  # serving log lines must never break the call it precedes, nor garbage collection
        return


def _polling(method: Callable[..., Any]) -> Callable[..., Any]:
    def call(self: AdminClient, *args: Any, **kwargs: Any) -> Any:
        _serve(self)
        return method(self, *args, **kwargs)

    call.__name__ = method.__name__
    call.__doc__ = method.__doc__
    return call


class LoggedAdminClient(AdminClient):  # type: ignore[misc]  # confluent-kafka ships no stubs for its C base
    """An AdminClient whose librdkafka log lines reach its `logger` (see the module docstring)."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        super().__init__(dict(conf))
        _live_admins.add(self)

    def __del__(self) -> None:
        _serve(self)


for _name in dir(AdminClient):
    _attr = inspect.getattr_static(AdminClient, _name)
    _plain_method = isinstance(_attr, types.FunctionType | types.MethodDescriptorType)
    if _plain_method and not _name.startswith("_") and _name != "poll":
        setattr(LoggedAdminClient, _name, _polling(getattr(AdminClient, _name)))


@atexit.register
def _serve_all() -> None:
    """Admins still alive at exit (module globals, cycles) hand over their last lines before logging shuts."""
    for admin in list(_live_admins):
        _serve(admin)
