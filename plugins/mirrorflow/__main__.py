"""`python -m mirrorflow` is the same as the `mirrorflow` console script."""

from mirrorflow.cli.app import main

main()
