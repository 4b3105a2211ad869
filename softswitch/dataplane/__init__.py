"""The DistCache pipeline as softswitch runs it: p4src/ in Python, file for file.

======================================  =====================================
p4src/                                  softswitch/dataplane/
======================================  =====================================
include/header.p4                       header.py
include/parser.p4                       parser.py
include/pipeline.p4 (its shared state)  shared.py
include/actions.p4                      actions.py
include/control/config.p4               config.py
include/control/liveness.p4             liveness.py
include/control/validation.p4           validation.py
include/control/probe.p4                probe.py
include/control/cache.p4                cache.py
include/control/coherence.p4            coherence.py
include/control/detector.p4             detector.py
include/control/telemetry.p4            telemetry.py
include/control/routing.p4              routing.py
include/control/forwarding.p4           forwarding.py
include/pipeline.p4                     ingress.py (DcIngress, and the Program)
======================================  =====================================

Constants (include/define.p4, include/size.p4) come from distcache/ (wire.py,
cluster.py, p4names.py); tests hold both sides equal.
"""

from softswitch.dataplane.ingress import PROGRAM, DistCachePipeline

__all__ = ["PROGRAM", "DistCachePipeline"]
