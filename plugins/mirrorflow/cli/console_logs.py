"""The console of Mirrorflow's commands: tables and clear errors, not the libraries' chatter.

* librdkafka's lines reach the `mirrorflow.kafka.librdkafka` logger (every client gets it, see
  `mirrorflow.kafka.client_logs`); here they go to a file, and the console shows only how many warnings or
  errors it holds. `--verbose` (or MIRRORFLOW_VERBOSE=1) sends them to the console as well.
* Spark's driver logs warnings and errors only (`mirrorflow.spark.quiet`); `--verbose` sets
  MIRRORFLOW_SPARK_LOG_LEVEL=INFO unless it is set already.
* The deprecation warnings that libraries raise inside our calls, listed in `_LIBRARY_DEPRECATIONS` one by one,
  are not shown; any other warning still is.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

LIBRDKAFKA_LOGGER = "mirrorflow.kafka.librdkafka"  # mirrorflow.kafka.client_logs.LIBRDKAFKA_LOGGER
SPARK_LEVEL_ENV = "MIRRORFLOW_SPARK_LOG_LEVEL"  # mirrorflow.spark.quiet.LEVEL_ENV
VERBOSE_ENV = "MIRRORFLOW_VERBOSE"

# (message regex, module regex) of deprecation warnings one library raises about another inside our calls, where
# no call of ours avoids them:
# * dag.test() runs tasks through Airflow's in-process API, a Starlette TestClient; Starlette wants httpx2 rather
#   than httpx (a UserWarning subclass). Installing httpx2 would remove it at the source.
# * plugins/.airflowignore keeps Airflow's plugin loader out of the mirrorflow package; the Task SDK reads it as
#   glob syntax whatever `[core] dag_ignore_file_syntax` says, through pathspec's deprecated GitWildMatchPattern.
_LIBRARY_DEPRECATIONS = (
    (r"Using `httpx` with `starlette\.testclient` is deprecated", r"fastapi\.testclient|starlette\."),
    (r"GitWildMatchPattern \('gitwildmatch'\) is deprecated", r"airflow\..*file_discovery"),
)


class _Tally(logging.Handler):
    """Counts the records at WARNING or above, for the one-line summary."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


class ConsoleLogs:
    """What `quiet_console` set up: where librdkafka's lines went and how many were warnings or errors."""

    def __init__(self, log_file: Path | None, tally: _Tally) -> None:
        self.log_file = log_file
        self._tally = tally

    @property
    def librdkafka_problems(self) -> int:
        return self._tally.count

    def summary(self) -> str | None:
        """One line for the end of the output when librdkafka reported warnings or errors, else None."""
        if not self._tally.count:
            return None
        where = f"; see {self.log_file}" if self.log_file is not None else ""
        return (
            f"librdkafka logged {self._tally.count} warning(s) or error(s), e.g. retries while a broker starts{where}"
        )


def is_verbose(flag: bool = False) -> bool:
    return flag or os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes")


def filter_library_deprecations() -> None:
    """Hide the warnings of `_LIBRARY_DEPRECATIONS`. Airflow puts its own filters first when it is imported
    (showing every DeprecationWarning of an `airflow` module), so call this again once Airflow is loaded."""
    for message, module in _LIBRARY_DEPRECATIONS:
        warnings.filterwarnings("ignore", message=message, category=Warning, module=module)


def quiet_console(log_dir: Path | None, *, verbose: bool = False) -> ConsoleLogs:
    """Route librdkafka's lines to `log_dir/librdkafka.log` (or nowhere when None) unless verbose."""
    filter_library_deprecations()
    log = logging.getLogger(LIBRDKAFKA_LOGGER)
    tally = _Tally()
    log.addHandler(tally)
    if is_verbose(verbose):
        os.environ.setdefault(SPARK_LEVEL_ENV, "INFO")
        log.setLevel(logging.DEBUG)
        return ConsoleLogs(None, tally)
    log.propagate = False
    log.setLevel(logging.INFO)
    log_file = None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        log_file = log_dir / "librdkafka.log"
        handler = logging.FileHandler(log_file, mode="w")  # this run's lines only
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
    return ConsoleLogs(log_file, tally)
