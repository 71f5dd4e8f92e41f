"""The console set-up of the demo and the CLI commands (`mirrorflow.cli.console_logs`): where librdkafka's lines
go, and which library warnings are hidden (only the listed ones)."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirrorflow.cli.console_logs import LIBRDKAFKA_LOGGER, filter_library_deprecations, quiet_console
from mirrorflow.kafka.client_logs import LIBRDKAFKA_LOGGER as CLIENTS_LOGGER


@pytest.fixture
def librdkafka_log() -> Iterator[logging.Logger]:
    log = logging.getLogger(LIBRDKAFKA_LOGGER)
    saved = (list(log.handlers), log.level, log.propagate)
    yield log
    for handler in log.handlers:
        if handler not in saved[0]:
            handler.close()
    log.handlers[:], log.level, log.propagate = saved


def shown(message: str, category: type[Warning], module: str) -> bool:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filter_library_deprecations()
        warnings.warn_explicit(message, category, f"/x/{module.replace('.', '/')}.py", 1, module=module)
    return bool(caught)


def test_only_the_listed_library_deprecations_are_hidden() -> None:
    class StarletteLike(UserWarning):
        pass

    starlette = "Using `httpx` with `starlette.testclient` is deprecated; install `httpx2` instead."
    pathspec = "GitWildMatchPattern ('gitwildmatch') is deprecated. Use 'gitignore' for GitIgnoreSpecPattern."
    assert not shown(starlette, StarletteLike, "fastapi.testclient")
    assert not shown(pathspec, DeprecationWarning, "airflow.sdk._shared.module_loading.file_discovery")
    assert shown(pathspec, DeprecationWarning, "mirrorflow.somewhere")  # same text, our own module: shown
    assert shown("the thing is deprecated", DeprecationWarning, "airflow.models.dag")  # not listed: shown


def test_librdkafka_lines_go_to_a_file_and_are_counted(librdkafka_log: logging.Logger, tmp_path: Path) -> None:
    assert LIBRDKAFKA_LOGGER == CLIENTS_LOGGER  # the name the clients log under
    logs = quiet_console(tmp_path, verbose=False)
    assert logs.summary() is None
    librdkafka_log.warning("GETPID [rdkafka#producer-1] [thrd:main]: retrying")
    librdkafka_log.info("CONFWARN [rdkafka#producer-1] [thrd:app]: informational")
    assert not librdkafka_log.propagate  # nothing reaches the console's handlers
    assert logs.librdkafka_problems == 1
    assert logs.summary() == (
        f"librdkafka logged 1 warning(s) or error(s), e.g. retries while a broker starts; see {tmp_path}/librdkafka.log"
    )
    text = (tmp_path / "librdkafka.log").read_text()
    assert "WARNING GETPID" in text and "INFO CONFWARN" in text


def test_verbose_shows_librdkafka_and_asks_spark_for_info(
    librdkafka_log: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRRORFLOW_SPARK_LOG_LEVEL", "unset below")  # recorded, so the test's value is undone
    monkeypatch.delenv("MIRRORFLOW_SPARK_LOG_LEVEL")
    monkeypatch.setenv("MIRRORFLOW_VERBOSE", "1")
    logs = quiet_console(None)
    assert librdkafka_log.propagate and librdkafka_log.level == logging.DEBUG
    assert logs.log_file is None
    assert os.environ["MIRRORFLOW_SPARK_LOG_LEVEL"] == "INFO"
