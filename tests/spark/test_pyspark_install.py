"""The Spark provider drags in pyspark-client, whose files overwrite pyspark's; `make setup` reinstalls pyspark
last so that the Python side matches the bundled Spark jars. This test fails if that fix is lost."""

from __future__ import annotations

import re
from pathlib import Path

import pyspark


def _spark_core_jar_version() -> str:
    jars = Path(pyspark.__file__).parent / "jars"
    found = [m.group(1) for p in jars.glob("spark-core_*.jar") if (m := re.search(r"-(\d+\.\d+\.\d+)\.jar$", p.name))]
    assert len(found) == 1, f"expected one spark-core jar in {jars}, found {found}"
    return found[0]


def test_pyspark_python_files_match_spark_jars() -> None:
    assert pyspark.__version__ == _spark_core_jar_version()


def test_pyspark_version_matches_the_pin() -> None:
    pin = next(
        line.split("==", 1)[1].strip()
        for line in (Path(__file__).parents[2] / "requirements.txt").read_text().splitlines()
        if line.startswith("pyspark==")
    )
    assert pyspark.__version__ == pin
