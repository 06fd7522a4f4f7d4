"""The gRPC face of the solver: the Placement servicer, health and reflection, and a small client.

Only this package knows about gRPC; it converts with ``solver.service.wire`` and calls ``solver.solve``.
"""

import os

# A solve forks a process of its own for the fallback's orders beside the model's build
# (solver.domain.forked). gRPC core's fork handlers, on by default, skip their work when other
# threads are inside gRPC (a served call always is), log a line, and leave the child to die of a
# segmentation fault (16,384 nodes, served, session 37): the child never uses gRPC, so they are
# off unless the operator set them. Read when gRPC starts, so set before anything of it is used.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
