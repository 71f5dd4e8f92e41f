"""Client callbacks (`oauth_cb`, `error_cb`...) named in a config, made callable where the client is built.

A callable cannot travel: configs go to Spark executors pickled, to the copy job's driver in an environment
variable, and into XCom as JSON. So a config names its callbacks, and `resolve_callbacks` turns the names into
functions in the process that builds the client (`with_logger` calls it for every client Mirrorflow makes).

Names come only from Airflow connections, after the Kafka provider's hook has checked them against its
`[apache_kafka] callback_allowlist` (mm2.properties refuses `*_cb` keys: neither client knows them). A name is
one of:
* a dotted path `package.module.function`, importable wherever the client is built (the Airflow worker, the
  Spark driver and executors);
* `msk-iam:<region>`: the Amazon MSK IAM token the provider's hook adds for an MSK bootstrap address with
  `sasl.mechanism=OAUTHBEARER` (needs `aws-msk-iam-sasl-signer-python`, the provider's `msk` extra).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any

from mirrorflow.config.overrides import CALLBACK_KEYS
from mirrorflow.core.errors import UsageError

MSK_IAM = "msk-iam:"


def resolve_callbacks(settings: Mapping[str, Any]) -> dict[str, Any]:
    """`settings` with each callback name replaced by the function it names (functions are kept as given)."""
    out = dict(settings)
    for key in CALLBACK_KEYS:
        value = out.get(key)
        if isinstance(value, str):
            out[key] = _function(key, value)
    return out


def _function(key: str, name: str) -> Callable[..., Any]:
    if name.startswith(MSK_IAM):
        region = name.removeprefix(MSK_IAM).strip()
        _require("aws_msk_iam_sasl_signer", "aws-msk-iam-sasl-signer-python (the Kafka provider's `msk` extra)")
        return functools.partial(msk_iam_token, region)
    module_name, _, attribute = name.rpartition(".")
    try:
        function = getattr(importlib.import_module(module_name), attribute) if module_name else None
    except (ImportError, AttributeError):
        function = None
    if not callable(function):
        raise UsageError(
            f"client callback {key} = {name}: no such function importable here; install the module that defines "
            "it wherever Mirrorflow's clients run (Airflow workers, and the Spark driver and executors)"
        )
    return function  # type: ignore[no-any-return]


def _require(module: str, package: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f"the connection's managed OAuth token needs {package}; install it where clients run"
        ) from None


def msk_iam_token(region: str, _oauthbearer_config: str) -> tuple[str, float]:
    """An Amazon MSK IAM token for librdkafka's `oauth_cb`: (token, expiry in seconds since the epoch)."""
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

    token, expiry_ms = MSKAuthTokenProvider.generate_auth_token(region)
    return token, expiry_ms / 1000
