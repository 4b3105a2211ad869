"""Registers and counters of softswitch's state: indexed cells, as v1model's ``register`` and ``counter``.

Registers change only by packets (the P4Runtime server neither reads nor writes them, as on BMv2);
counters are read and written by the server through :class:`softswitch.target.CounterTarget`.
"""

from __future__ import annotations

from array import array


def _cells(bitwidth: int, size: int) -> array[int] | list[int]:
    """Zeroed storage: a typed array for widths up to 64 bits, else a list of ints."""
    for code in ("B", "H", "I", "L", "Q"):
        if array(code).itemsize * 8 >= bitwidth:
            return array(code, [0]) * size  # repetition allocates exactly
    return [0] * size  # one shared 0 object per cell until written: 8 bytes a cell


class RegisterArray:
    """A P4 register: ``size`` cells of ``bitwidth`` bits, zero at start and on reset."""

    __slots__ = ("_cells", "_mask", "bitwidth", "name", "size")

    def __init__(self, name: str, bitwidth: int, size: int) -> None:
        self.name = name
        self.bitwidth = bitwidth
        self.size = size
        self._mask = (1 << bitwidth) - 1
        self._cells = _cells(bitwidth, size)

    def read(self, index: int) -> int:
        """Cell value; an out-of-range index reads 0 (BMv2 logs an error and goes on)."""
        if 0 <= index < self.size:
            return self._cells[index]
        return 0

    def write(self, index: int, value: int) -> None:
        """Store ``value`` truncated to the bit width; an out-of-range index is ignored."""
        if 0 <= index < self.size:
            self._cells[index] = value & self._mask

    def clear(self) -> None:
        self._cells = _cells(self.bitwidth, self.size)


class CounterArray:
    """An indexed P4 counter: packets and bytes per cell (both kept whatever the unit)."""

    __slots__ = ("_bytes", "_packets", "name", "size", "unit")

    def __init__(self, name: str, size: int, unit: str = "packets") -> None:
        self.name = name
        self.size = size
        self.unit = unit
        self._packets = array("Q", [0]) * size
        self._bytes = array("Q", [0]) * size

    def count(self, index: int, nbytes: int = 0) -> None:
        """One more packet of ``nbytes`` bytes at ``index``; out of range is ignored."""
        if 0 <= index < self.size:
            self._packets[index] += 1
            self._bytes[index] += nbytes

    def read(self, index: int) -> tuple[int, int]:
        """(packets, bytes) at ``index``; (0, 0) out of range."""
        if 0 <= index < self.size:
            return self._packets[index], self._bytes[index]
        return 0, 0

    def write(self, index: int, packets: int, nbytes: int) -> None:
        """Set a cell (P4Runtime MODIFY of a CounterEntry); out of range is ignored."""
        if 0 <= index < self.size:
            self._packets[index] = packets
            self._bytes[index] = nbytes

    def clear(self) -> None:
        self._packets = array("Q", [0]) * self.size
        self._bytes = array("Q", [0]) * self.size
