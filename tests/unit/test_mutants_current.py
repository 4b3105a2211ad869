"""The mutants of ``make mutants`` (tests/ptf/mutants.py) still name code that exists: a mutant whose text a
change to p4src/ removed would fail its run only when someone runs it, minutes later; here it fails at once."""

from __future__ import annotations

import pytest

from tests.ptf.mutants import MUTANTS, P4, Mutant


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_changes_code_that_is_there(mutant: Mutant) -> None:
    text = (P4 / mutant.file).read_text()
    assert text.count(mutant.old) == mutant.count, (
        f"{mutant.name!r}: {mutant.file} holds its text {text.count(mutant.old)} times, expected {mutant.count}"
    )
    assert mutant.new != mutant.old
