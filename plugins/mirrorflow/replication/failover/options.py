"""What the operator asks a failover or failback for, read and checked the same way from the CLI's flags and the
Airflow DAG's trigger form.

Its own module so the DAG, the CLI and the steps can all read the options without importing the runbook driver
(which imports every step).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mirrorflow.core.errors import UsageError
from mirrorflow.core.patterns import PatternError, compile_patterns
from mirrorflow.replication.failover.state import default_state_dir
from mirrorflow.replication.flow_cycle import state_root_override

Direction = Literal["failover", "failback"]
Mode = Literal["planned", "unplanned"]
FENCES = ("none", "acl", "command")
REDIRECTS = ("none", "topic", "file", "command", "webhook")


@dataclass(frozen=True)
class FailoverOptions:
    """What the operator asked for; `options_from_values` builds it from CLI options or DAG params."""

    config: str
    primary: str
    dr: str
    direction: Direction = "failover"
    groups: str | None = None
    mode: Mode = "planned"
    fence: str = "none"
    fence_principals: tuple[str, ...] = ()
    fence_command: str | None = None
    unfence_command: str | None = None
    fence_verify_seconds: float = 5.0
    redirect: str = "none"
    redirect_target: str | None = None
    dry_run: bool = False
    max_lag_records: int | None = None
    max_lag_seconds: float | None = None
    state_dir: str | None = None
    restart: bool = False
    clusters: tuple[str, ...] = ()
    strict_groups: bool = False  # a group with no exact translation refuses the run instead of being skipped
    open_transaction_wait_seconds: float = 60.0  # how long verify_fence waits for transactions open at the fence
    run: str = ""
    """The Airflow DAG run id: each DAG run is its own runbook ("" for the CLI: one per direction and pair)."""

    @property
    def source(self) -> str:
        """The cluster the clients leave."""
        return self.primary if self.direction == "failover" else self.dr

    @property
    def target(self) -> str:
        """The cluster the clients move to."""
        return self.dr if self.direction == "failover" else self.primary

    def state_path(self) -> Path | None:
        """The air-gapped override: `--state-dir`, else `<$MIRRORFLOW_STATE_DIR>/<direction>-<primary>-<dr>` when
        that variable is set (relative to the working directory), where `mirrorflow run` then also looks for
        pause markers. None (the default): the state is in Kafka."""
        if self.state_dir:
            return Path(self.state_dir)
        root = state_root_override(Path.cwd())
        return None if root is None else default_state_dir(self.direction, self.primary, self.dr, root)

    def key(self) -> dict[str, Any]:
        return {
            "direction": self.direction,
            "primary": self.primary,
            "dr": self.dr,
            "mode": self.mode,
            "groups": self.groups,
            "fence": self.fence,
            "redirect": self.redirect,
        }

    def validate(self) -> None:
        if self.primary == self.dr:
            raise UsageError(f"--primary and --dr are both '{self.primary}': name two different cluster aliases")
        if self.mode not in ("planned", "unplanned"):
            raise UsageError(f"--mode {self.mode}: use planned or unplanned")
        if self.fence not in FENCES:
            raise UsageError(f"--fence {self.fence}: use one of {', '.join(FENCES)}")
        if self.redirect not in REDIRECTS:
            raise UsageError(f"--redirect {self.redirect}: use one of {', '.join(REDIRECTS)}")
        if self.fence == "acl" and not self.fence_principals:
            raise UsageError("--fence acl needs --fence-principals User:name,... (the producers to deny WRITE)")
        if self.fence == "acl" and any(":" not in p for p in self.fence_principals):
            raise UsageError(f"--fence-principals {','.join(self.fence_principals)}: write each as Type:name")
        if self.fence == "command" and not self.fence_command:
            raise UsageError("--fence command needs --fence-command CMD")
        if self.unfence_command and self.fence != "command":
            raise UsageError("--unfence-command undoes --fence command: use it with --fence command only")
        if self.redirect in ("file", "command", "webhook") and not self.redirect_target:
            what = {"file": "a file path", "command": "a shell command", "webhook": "an http(s) URL"}[self.redirect]
            raise UsageError(f"--redirect {self.redirect} needs --redirect-target ({what})")
        if self.redirect == "webhook" and not str(self.redirect_target).startswith(("http://", "https://")):
            raise UsageError(f"--redirect-target {self.redirect_target}: a webhook needs an http(s) URL")
        if self.max_lag_records is not None and self.max_lag_records < 0:
            raise UsageError(f"--max-lag-records {self.max_lag_records}: give 0 or more")
        if self.max_lag_seconds is not None and self.max_lag_seconds < 0:
            raise UsageError(f"--max-lag-seconds {self.max_lag_seconds:g}: give 0 or more")
        if self.open_transaction_wait_seconds < 0:
            raise UsageError(f"--open-transaction-wait-seconds {self.open_transaction_wait_seconds:g}: give 0 or more")
        if self.fence_verify_seconds < 0:
            raise UsageError(f"--fence-verify-seconds {self.fence_verify_seconds:g}: give 0 or more")
        if self.groups is not None:
            try:
                compile_patterns([self.groups], key="--groups")
            except PatternError as err:
                raise UsageError(str(err)) from err


def options_from_values(
    values: Mapping[str, Any],
    *,
    config: str,
    direction: str,
    state_dir: str | Path | None,
    dry_run_default: bool = False,
) -> FailoverOptions:
    """Validated options from the operator's values, keyed by field name (absent: the field's default).

    The one reading of the CLI's flags and the DAG's trigger form, so both accept and refuse the same input with
    the same message (UsageError, exit code 2). `fence_principals` is a list or the CLI's comma-separated text."""
    mode = values.get("mode", "planned")
    if mode not in ("planned", "unplanned"):
        raise UsageError(f"--mode {mode}: use planned or unplanned")
    options = FailoverOptions(
        config=config,
        primary=str(values["primary"]),
        dr=str(values["dr"]),
        direction="failback" if direction == "failback" else "failover",
        groups=values.get("groups"),
        mode="unplanned" if mode == "unplanned" else "planned",
        fence=str(values.get("fence", "none")),
        fence_principals=_principals(values.get("fence_principals")),
        fence_command=values.get("fence_command"),
        unfence_command=values.get("unfence_command"),
        fence_verify_seconds=float(values.get("fence_verify_seconds", 5.0)),
        redirect=str(values.get("redirect", "none")),
        redirect_target=values.get("redirect_target"),
        dry_run=bool(values.get("dry_run", dry_run_default)),
        max_lag_records=values.get("max_lag_records"),
        max_lag_seconds=values.get("max_lag_seconds"),
        state_dir=None if state_dir is None else str(state_dir),
        restart=bool(values.get("restart", False)),
        strict_groups=bool(values.get("strict_groups", False)),
        open_transaction_wait_seconds=float(values.get("open_transaction_wait_seconds", 60.0)),
    )
    options.validate()
    return options


def _principals(raw: str | Iterable[str] | None) -> tuple[str, ...]:
    if isinstance(raw, str):  # "User:a, User:b" from the shell
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    return tuple(str(p) for p in raw or ())
