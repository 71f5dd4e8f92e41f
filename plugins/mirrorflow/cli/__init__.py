"""The `mirrorflow` command line: every command calls the same functions the DAG tasks call."""
