"""The abort-ahead producer's close warns (librdkafka refuses its abort while an InitProducerId is pending): the
warning is filtered for the whole process at import, because `warnings.catch_warnings` around the close swaps the
process's filters and is not thread-safe, and with several copy ranges in one process the warning reached stderr
(session 17's `make bench`). A fresh interpreter, so no other test's filters count."""

from __future__ import annotations

import subprocess
import sys

WARN = (
    "import warnings\n"
    "{imports}\n"
    "warnings.warn_explicit('Producer abort_transaction failed during close: Conflicting init_transactions API call',"
    " RuntimeWarning, 'fence.py', 56)\n"
)


def _stderr(imports: str) -> str:
    code = WARN.format(imports=imports)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr


def test_importing_the_fence_module_silences_the_close_warning_for_every_thread() -> None:
    assert "abort_transaction failed" in _stderr(""), "without the module the warning shows (the check can fail)"
    assert _stderr("import mirrorflow.kafka.fence") == ""
