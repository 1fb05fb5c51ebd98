"""spark-submit import_job.py SPEC — bulk import (SPEC: the job spec as JSON, or a JSON file path).

See kmilvus_jobs/importer.py for the spec and the steps; the manifest goes to spec.manifest_key.
"""

import sys

from kmilvus_jobs import importer
from kmilvus_jobs.common import main

if __name__ == "__main__":
    sys.exit(main("import", importer.run))
