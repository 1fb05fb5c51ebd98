"""Generated protobuf/gRPC modules for kmilvus' internal services.

Importing this package regenerates the modules when a .proto changed (or on a fresh checkout),
so code never runs against stale generated code.
"""

from kmilvus.proto import build as _build

try:
    _build.build()
except OSError:  # read-only install: the image build generated them already
    pass
