"""The typer application; subcommands live in sibling modules and register themselves here."""

from __future__ import annotations

import sys

import typer

from mirrorflow.core.errors import MirrorflowError

app = typer.Typer(
    name="mirrorflow",
    help="MirrorMaker 2 semantics on Airflow and Spark.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Imported here so that `mirrorflow --help` stays fast and each command owns its module.
    from mirrorflow.cli import (
        audit_cmd,
        convert_cmd,
        drill_cmd,
        failover_cmd,
        local_cmd,
        metrics_cmd,
        plan_cmd,
        reset_cmd,
        run_cmd,
        spark_cmd,
        translate_cmd,
        validate_cmd,
    )

    validate_cmd.register(app)
    convert_cmd.register(app)
    drill_cmd.register(app)
    local_cmd.register(app)
    plan_cmd.register(app)
    run_cmd.register(app)
    translate_cmd.register(app)
    metrics_cmd.register(app)
    failover_cmd.register(app)
    failover_cmd.register_failback(app)
    failover_cmd.register_unpause(app)
    audit_cmd.register(app)
    reset_cmd.register(app)
    spark_cmd.register(app)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; operator errors print one clear message and exit with their code, never a traceback."""
    _register()
    try:
        app(args=argv, prog_name="mirrorflow")
    except MirrorflowError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)
