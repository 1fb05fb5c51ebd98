"""spark-submit compact_job.py SPEC — compaction (SPEC: the job spec as JSON, or a JSON file path).

See kmilvus_jobs/compactor.py for the spec; the manifest goes to spec.manifest_key.
"""

import sys

from kmilvus_jobs import compactor
from kmilvus_jobs.common import main

if __name__ == "__main__":
    sys.exit(main("compact", compactor.run))
