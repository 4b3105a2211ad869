"""Key digests as the tests' clusters compute them: ``Cluster()``'s, keyed by the development secret.

A test cluster built with ``Cluster(...)`` (no ``key_secret``) digests keys as :func:`digest` does; a
deployment's run folder has a secret of its own, and its tests use ``cluster.digest``.
"""

from __future__ import annotations

from distcache.cluster import Cluster

digest = Cluster().digest
