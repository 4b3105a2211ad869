"""P4Runtime for DistCache's control plane: a client (``client``), the entries a switch needs derived from
the cluster (``plan``), bringing a switch to them by read-back and diff (``reconcile``), and data-plane
liveness probes sent through a leaf (``probes``).  A library: the controller, the agents, softswitch's
local mode, dcnet and the benchmarks use it; it imports no application.
"""
