"""Generated protobuf/gRPC modules for kmilvus' internal services.

Importing this package regenerates the modules when a .proto changed (or on a fresh checkout),
so code never runs against stale generated code.
"""

import contextlib

from kmilvus.proto import build as _build

with contextlib.suppress(OSError):  # read-only install: the image build generated them already
    _build.build()
