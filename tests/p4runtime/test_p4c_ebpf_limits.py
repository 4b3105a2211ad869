"""The limits of p4c-ebpf (p4c 1.2.5.16) that the shared P4 works around, each shown by the smallest program
that hits it (tests/p4runtime/p4c_ebpf/, docs/ebpf.md): the C the back end writes for it is wrong in the way
the docs say.  If a p4c release fixes one, its test fails: the docs and the workaround can go."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from softswitch.ebpf import build

pytestmark = [
    pytest.mark.ebpf,
    pytest.mark.skipif(bool(build.missing_tools()), reason=f"needs {', '.join(build.missing_tools())}"),
]

HERE = Path(__file__).resolve().parent / "p4c_ebpf"
LIMITS = {
    # m.low = hdr.h.a[0:0]: one bit wanted, the whole low byte written (no mask)
    "slice_at_bit_0": r"m->low = \(u8\)hdr->h\.a;",
    # (bit<32>)(~a) for a 16-bit a: C complements a promoted to int, its upper 16 bits too
    "complement_widened": r"m->wide = \(u32\)~hdr->h\.a;",
    # { k, b } with a 128-bit k: a compound literal that puts the array's address where its bytes go
    "wide_field_in_struct_expression": r"m->d = \(struct d_t\)\{\.k = hdr->h\.k,",
    # bool valid = hdr.h.isValid(): declared, tested, never assigned (a bare isValid() initializer is dropped)
    "bool_from_is_valid": r"(?s)u8 valid_0;(?!.*valid_0 =).*if \(valid_0\)",
}


@pytest.mark.parametrize("program", sorted(LIMITS))
def test_the_back_end_still_writes_the_wrong_c(program: str, tmp_path: Path) -> None:
    out = tmp_path / f"{program}.c"
    done = subprocess.run(
        [build.P4C_EBPF, "--arch", "psa", "--target", "kernel", "-o", str(out), str(HERE / f"{program}.p4")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.search(LIMITS[program], out.read_text()), f"p4c-ebpf no longer writes {LIMITS[program]!r}"
