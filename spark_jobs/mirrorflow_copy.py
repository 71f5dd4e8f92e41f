"""spark-submit entry point of the copy: `spark-submit spark_jobs/mirrorflow_copy.py CONFIG --flow A->B`.

All logic lives in `mirrorflow.spark.copy_job`; this file only exists so spark-submit has a script to run.
"""

import sys

from mirrorflow.spark.copy_job import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
