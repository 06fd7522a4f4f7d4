"""The gRPC face of the solver: the Placement servicer, health and reflection, and a small client.

Only this package knows about gRPC; it converts with ``solver.service.wire`` and calls ``solver.solve``.
"""
