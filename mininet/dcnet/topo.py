"""Leaf-spine topologies for Mininet, built from a cluster description."""

from __future__ import annotations

from mininet.topo import Topo

from distcache.cluster import Cluster, Role


class LeafSpineTopo(Topo):
    """Spines over storage-rack and client-rack leaves, hosts under leaves.

    Every name, address and port number comes from :class:`Cluster`, so the
    controller's routes match the wiring by construction.
    """

    def build(self, cluster: Cluster, **switch_opts: object) -> None:
        for sw in cluster.switches():
            # a spine's silence is what its leaves' liveness measures: a real-time priority (which switches
            # get one on each target: dcnet.p4switch.P4RuntimeSwitch)
            spine = sw.role == Role.SPINE
            # a leaf's probe source (controller or agent) writes its probes into its probe port (p4rt.probes)
            probe_port = sw.role != Role.SPINE
            self.addSwitch(
                sw.name,
                device_id=sw.device_id,
                grpc_port=sw.grpc_port,
                spine=spine,
                probe_port=probe_port,
                **switch_opts,
            )
        for h in cluster.hosts():
            self.addHost(h.name, ip=f"{h.ip}/32", mac=h.mac)
        shaping = {"bw": cluster.link_mbps} if cluster.link_mbps else {}  # tc htb on both ends (TCLink)
        for ln in cluster.links():
            self.addLink(ln.a, ln.b, port1=ln.a_port, port2=ln.b_port, **shaping)
