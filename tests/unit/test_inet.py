"""distcache.inet.csum16 against scapy's own Internet checksum, and a header it makes checks to zero."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from scapy.utils import checksum

from distcache.inet import csum16


@given(st.binary(min_size=0, max_size=60).filter(lambda b: len(b) % 2 == 0))
def test_csum16_is_the_internet_checksum(data: bytes) -> None:
    assert csum16(data) == checksum(data)


def test_a_sum_that_is_a_multiple_of_0xffff_and_a_header_with_its_checksum() -> None:
    assert csum16(b"\xff\xff") == checksum(b"\xff\xff") == 0  # folding gives 0xFFFF: complemented, 0
    assert csum16(b"\x00\x00") == 0xFFFF
    header = bytes.fromhex("45000054a6f240004001") + b"\0\0" + bytes.fromhex("c0a80001c0a800c7")
    filled = header[:10] + csum16(header).to_bytes(2, "big") + header[12:]
    assert csum16(filled) == 0  # a receiver's check of a good header
