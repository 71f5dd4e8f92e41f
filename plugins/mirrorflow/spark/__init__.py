"""Spark driver and executor entry points of the copy: the only package that imports pyspark."""
