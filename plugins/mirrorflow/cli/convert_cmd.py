"""`mirrorflow convert strimzi FILE.yaml [--output FILE] [--secrets-dir DIR]`: a Strimzi KafkaMirrorMaker2
resource as mm2.properties (`mirrorflow.config.strimzi`). Prints the file, or writes it to `--output`; a
resource that cannot be converted is an error naming the field (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mirrorflow.config.strimzi import DEFAULT_SECRETS_DIR, convert
from mirrorflow.core.errors import UsageError

convert_app = typer.Typer(help="Convert another replicator's configuration into mm2.properties.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(convert_app, name="convert")


@convert_app.command("strimzi", help="A Strimzi KafkaMirrorMaker2 resource (YAML) as mm2.properties.")
def strimzi(
    resource: Annotated[Path, typer.Argument(help="The KafkaMirrorMaker2 YAML file.", metavar="FILE")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
    secrets_dir: Annotated[
        str | None,
        typer.Option(
            "--secrets-dir",
            help="Where the Kubernetes Secrets are mounted, one directory per Secret: passwords become "
            f"${{directory:DIR/<secret>:<key>}} references (default: ${{env:...}} references; certificates "
            f"under {DEFAULT_SECRETS_DIR}).",
        ),
    ] = None,
) -> None:
    try:
        text = resource.read_text(encoding="utf-8")
    except OSError as err:
        raise UsageError(f"cannot read {resource}: {err.strerror}") from None
    properties = convert(text, where=str(resource), secrets_dir=secrets_dir)
    if output is None:
        typer.echo(properties, nl=False)
        return
    output.write_text(properties, encoding="utf-8")
    typer.echo(f"wrote {output}; check it with: mirrorflow validate {output}", err=True)
