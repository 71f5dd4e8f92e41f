"""`mirrorflow spark pack`: the package zip and the packed executor env a Spark cluster's executors need."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Annotated

import typer

from mirrorflow.spark.packaging import ARCHIVE_ENV, cluster_submit_args, package_py_files, packed_env

spark_app = typer.Typer(name="spark", help="Ship Mirrorflow to a Spark cluster's executors.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(spark_app, name="spark")


@spark_app.command("pack")
def pack(
    directory: Annotated[Path, typer.Option("--dir", help="Where to write mirrorflow.zip and the env archive.")] = Path(
        "build/spark"
    ),
    python: Annotated[
        str | None, typer.Option("--python", help="Interpreter the executors will run (default: this one).")
    ] = None,
) -> None:
    """Write the package zip (`--py-files`) and the packed env (`--archives`); print the spark-submit options."""
    archive = packed_env(python=python, log=True)
    py_files = package_py_files(directory)
    shipped = directory / "mirrorflow-executor-env.tar.gz"
    shutil.copyfile(archive, shipped)
    typer.echo(f"package: {py_files}\nexecutor env: {shipped}")
    typer.echo("spark-submit options: " + shlex.join(cluster_submit_args(py_files.resolve(), shipped.resolve())))
    typer.echo(f"for the Airflow copy task: export {ARCHIVE_ENV}={shlex.quote(str(shipped.resolve()))}")
