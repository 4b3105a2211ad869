"""Key mapping and partition hashing: defined once, used by every part.

Two independent hash functions place a key (paper §3.1):

* ``h0`` picks the key's *spine* partition bucket.  It is CRC-32 (the
  IEEE/zlib polynomial, the ``HashAlgorithm.crc32`` of v1model) of the 16-byte
  key digest, modulo :data:`N_SPINE_BUCKETS`.  The client-rack switch computes
  the same value in P4; the controller maps buckets to spines (consistent
  hashing with virtual nodes), so a failed spine's buckets move elsewhere.
* ``h1`` picks the *storage server* that owns the key (and hence its rack and
  storage-rack leaf cache) by rendezvous hashing: every server scores the key
  with BLAKE2b keyed by the server's name, and the highest score wins.  Adding a
  server moves only the keys the new server wins (about 1/n of them), and
  removing one moves only its own keys.  Keyed BLAKE2b (no personalization) is
  in Python's hashlib and in Go's x/crypto, so the compiled parts compute the
  same placement.  It is independent of ``h0`` and only ever computed by hosts.

User keys (``str`` or ``bytes``) travel byte for byte (``str`` is UTF-8 encoded first, :func:`key_bytes`);
switches, the partition and the placement see only a key's 16-byte **digest**
(:func:`distcache.wire.key_digest`, keyed by the deployment's ``key_secret``: ``Cluster.digest``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import zlib
from collections.abc import Sequence

from distcache.errors import InvalidKeyError
from distcache.p4defines import SPINE_BUCKETS
from distcache.wire import MAX_KEY, SECRET_LEN

__all__ = [
    "DEV_KEY_SECRET",
    "N_SPINE_BUCKETS",
    "InvalidKeyError",
    "h0",
    "h1",
    "h1_memo",
    "key_bytes",
    "new_key_secret",
    "secret_of",
    "server_score",
]

N_SPINE_BUCKETS = SPINE_BUCKETS
"""Buckets of the spine partition (h0): spine_partition's entries, ``SPINE_BUCKETS`` of p4src size.p4."""


def key_bytes(key: str | bytes) -> bytes:
    """A user key as the bytes Redis stores: ``str`` UTF-8 encoded, ``bytes`` as they are (the empty key too,
    as Redis allows it); InvalidKeyError for another type or a key past MAX_KEY bytes."""
    if isinstance(key, str):
        try:
            raw = key.encode("utf-8")
        except UnicodeEncodeError as e:  # lone surrogates: bytes decoded with surrogateescape, e.g. from argv
            raise InvalidKeyError(
                f"key is not valid Unicode text (character {e.start} is a lone surrogate); pass its bytes instead"
            ) from None
    elif isinstance(key, (bytes, bytearray, memoryview)):
        raw = bytes(key)
    else:
        raise InvalidKeyError(f"keys must be str or bytes, not {type(key).__name__}; convert it first (e.g. str(key))")
    if len(raw) > MAX_KEY:
        raise InvalidKeyError(f"key of {len(raw)} bytes is longer than the {MAX_KEY} bytes a request carries")
    return raw


def h0(digest: bytes) -> int:
    """Spine partition bucket of a key digest (CRC-32 mod N_SPINE_BUCKETS)."""
    return zlib.crc32(digest) % N_SPINE_BUCKETS


def server_score(digest: bytes, server: str) -> int:
    """Rendezvous score of a key digest on one storage server: 64-bit BLAKE2b keyed by the server's name."""
    name = server.encode("utf-8")
    if not 0 < len(name) <= hashlib.blake2b.MAX_KEY_SIZE:
        raise ValueError(f"storage server names must be 1-{hashlib.blake2b.MAX_KEY_SIZE} bytes, not {server!r}")
    return int.from_bytes(hashlib.blake2b(digest, digest_size=8, key=name).digest(), "big")


def h1(digest: bytes, servers: Sequence[str]) -> int:
    """Index in ``servers`` (their names) of the storage server that owns a key digest: the highest score wins."""
    if not servers:
        raise ValueError("the cluster has no storage servers")
    best, best_score = 0, -1
    for i, name in enumerate(servers):
        score = server_score(digest, name)
        if score > best_score:  # ties (p ~ 2^-64) go to the first server listed
            best, best_score = i, score
    return best


@functools.lru_cache(maxsize=1 << 16)
def h1_memo(digest: bytes, servers: tuple[str, ...]) -> int:
    """h1, remembered for the hot keys a client or shim places again and again (it hashes once per server)."""
    return h1(digest, servers)


DEV_KEY_SECRET = b"distcache public development key"
"""The key secret of a cluster with ``key_secret`` "": public, so anyone can craft colliding keys; a deployment
(harness) always writes its own (:func:`new_key_secret`)."""
assert len(DEV_KEY_SECRET) == SECRET_LEN


@functools.lru_cache(maxsize=16)
def secret_of(text: str) -> bytes | None:
    """The key secret a cluster's ``key_secret`` holds (``""``: DEV_KEY_SECRET); None if it holds none."""
    secret = None
    with contextlib.suppress(ValueError):
        secret = bytes.fromhex(text) if text else DEV_KEY_SECRET
    return secret if secret is not None and 16 <= len(secret) <= 64 else None


def new_key_secret() -> str:
    """A fresh random key secret, as a cluster file holds it (hex)."""
    return os.urandom(SECRET_LEN).hex()
