"""Clients of DistCache's own gRPC services (controller, agent, shim), beside their API (distcache/proto/).

The controller, the agents, dcnet and the tests all call these services; each client lives here, in the
library, so that no application imports another to reach one.
"""
