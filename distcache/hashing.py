"""Key mapping and partition hashing: defined once, used by every part.

Two independent hash functions place a key (paper §3.1):

* ``h0`` picks the key's *spine* partition bucket.  It is CRC-32 (the
  IEEE/zlib polynomial, the ``HashAlgorithm.crc32`` of v1model) of the 16-byte
  wire key, modulo :data:`N_SPINE_BUCKETS`.  The client-rack switch computes
  the same value in P4; the controller maps buckets to spines (consistent
  hashing with virtual nodes), so a failed spine's buckets move elsewhere.
* ``h1`` picks the *storage server* that owns the key (and hence its rack and
  storage-rack leaf cache) by rendezvous hashing: every server scores the key
  with BLAKE2b keyed by the server's name, and the highest score wins.  Adding a
  server moves only the keys the new server wins (about 1/n of them), and
  removing one moves only its own keys.  Keyed BLAKE2b (no personalization) is
  in Python's hashlib and in Go's x/crypto, so the compiled parts compute the
  same placement.  It is independent of ``h0`` and only ever computed by hosts.

User keys (``str`` or ``bytes``) map to 16-byte wire keys as follows:

* a key of at most 15 bytes (``str`` is UTF-8 encoded first) is padded with
  zero bytes to 15 bytes and followed by one byte holding its length, so
  short keys stay readable on the wire and in captures;
* a longer key becomes the first 15 bytes of its BLAKE2b digest followed by
  the byte ``0xFF`` (never a valid length), so it cannot collide with a
  short key.
"""

from __future__ import annotations

import functools
import hashlib
import zlib
from collections.abc import Sequence

from distcache.errors import InvalidKeyError
from distcache.p4defines import SPINE_BUCKETS
from distcache.wire import KEY_LEN

__all__ = ["N_SPINE_BUCKETS", "InvalidKeyError", "h0", "h1", "h1_memo", "server_score", "user_key", "wire_key"]

N_SPINE_BUCKETS = SPINE_BUCKETS
"""Buckets of the spine partition (h0): spine_partition's entries, ``SPINE_BUCKETS`` of p4src size.p4."""

_SHORT = KEY_LEN - 1
_LONG_MARK = 0xFF


def wire_key(key: str | bytes) -> bytes:
    """Map a user key to its 16-byte wire key (see the module docstring)."""
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
    if not raw:
        raise InvalidKeyError("keys must not be empty")
    if len(raw) <= _SHORT:
        return raw.ljust(_SHORT, b"\0") + bytes([len(raw)])
    return hashlib.blake2b(raw, digest_size=_SHORT, person=b"dc-wirekey").digest() + bytes([_LONG_MARK])


def user_key(wkey: bytes) -> bytes | None:
    """The user key of a short wire key, or ``None`` if it was hashed."""
    n = wkey[-1]
    return None if n == _LONG_MARK or n > _SHORT else wkey[:n]


def h0(wkey: bytes) -> int:
    """Spine partition bucket of a wire key (CRC-32 mod N_SPINE_BUCKETS)."""
    return zlib.crc32(wkey) % N_SPINE_BUCKETS


def server_score(wkey: bytes, server: str) -> int:
    """Rendezvous score of a wire key on one storage server: 64-bit BLAKE2b keyed by the server's name."""
    name = server.encode("utf-8")
    if not 0 < len(name) <= hashlib.blake2b.MAX_KEY_SIZE:
        raise ValueError(f"storage server names must be 1-{hashlib.blake2b.MAX_KEY_SIZE} bytes, not {server!r}")
    return int.from_bytes(hashlib.blake2b(wkey, digest_size=8, key=name).digest(), "big")


def h1(wkey: bytes, servers: Sequence[str]) -> int:
    """Index in ``servers`` (their names) of the storage server that owns a wire key: the highest score wins."""
    if not servers:
        raise ValueError("the cluster has no storage servers")
    best, best_score = 0, -1
    for i, name in enumerate(servers):
        score = server_score(wkey, name)
        if score > best_score:  # ties (p ~ 2^-64) go to the first server listed
            best, best_score = i, score
    return best


@functools.lru_cache(maxsize=1 << 16)
def h1_memo(wkey: bytes, servers: tuple[str, ...]) -> int:
    """h1, remembered for the hot keys a client or shim places again and again (it hashes once per server)."""
    return h1(wkey, servers)
