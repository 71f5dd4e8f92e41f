"""Flow steps as plain functions over a resolved Flow and clients; the CLI, DAGs and Spark job all call these."""
