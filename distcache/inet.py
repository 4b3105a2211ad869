"""Internet checksums, one definition for every piece that builds or checks an IPv4 header in Python: softswitch's
deparser, the probe source's frames and the tests' hand-built frames."""

from __future__ import annotations


def csum16(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data`` (even length): the one's complement of the one's
    complement sum of its 16-bit words, as P4's csum16.

    Computed on ``data`` read as one integer, not word by word: 2**16 is 1 modulo 0xFFFF, so that integer
    leaves the same remainder as the sum of its words, which is what folding the carries back computes
    (RFC 1071, "mod 0xFFFF") -- except that folding gives 0xFFFF, not 0, for a nonzero sum divisible by
    0xFFFF.  One C-level division instead of unpacking and summing ten words in Python."""
    x = int.from_bytes(data, "big")
    s = x % 0xFFFF
    if s == 0 and x:
        s = 0xFFFF
    return ~s & 0xFFFF
