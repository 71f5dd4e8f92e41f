"""When the claims of a round of a continuous copy start, and which runs have rounds at all (`copy_rounds`):
the ordering rules both the round loop and the Spark and Airflow shells need, in one place."""

from __future__ import annotations

TRY_SPAN_MS = 10_000
"""Claim-start milliseconds per Airflow try: round k of try t claims at the run's start + (t - 1) * span + k."""


def try_started_ms(run_started_ms: int, try_number: int) -> int:
    """Where the claims of an Airflow try of a run with rounds begin (Airflow counts from 1; 0: not run by
    Airflow): later tries are newer than the rounds of earlier ones (`CopyRounds.round_started_ms` also keeps
    them from dating after now)."""
    return run_started_ms + max(try_number - 1, 0) * TRY_SPAN_MS


def rounds_apply(delivery: str, round_seconds: float, run_seconds: float) -> bool:
    """Whether a continuous run copies in rounds: exactly-once only (an at-least-once copy has no fence, and two
    of its copies of a partition at once could skip records), and a round shorter than the run."""
    return delivery == "exactly-once" and 0 < round_seconds < run_seconds
