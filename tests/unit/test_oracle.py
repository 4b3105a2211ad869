"""The staleness oracle (loadgen.oracle): the rule of docs/protocol.md, "Checking reads", case by case."""

from __future__ import annotations

import json

from loadgen.oracle import ABSENT, Oracle, check_history, feed


def judged(*ops: tuple) -> tuple[int, int]:
    """(stale, wrong) of a history given as ("w", key, value, call, end[, acked, error]) and
    ("r", key, value, call, ret) tuples."""
    o = Oracle()
    for op in ops:
        if op[0] == "w":
            _, key, value, call, end, *rest = op
            acked, error = rest[0] if rest else True, rest[1] if len(rest) > 1 else False
            o.write(key, value, call, end, acked=acked, error=error)
        else:
            o.read(*op[1:])
    v = o.verdict()
    return v.stale, v.wrong


def test_the_latest_acknowledged_write_and_concurrent_ones_are_candidates() -> None:
    assert judged(("w", "k", "v1", 0, 10), ("r", "k", "v1", 20, 30)) == (0, 0)
    # v2 overlaps the read: v1 and v2 are both candidates
    assert judged(("w", "k", "v1", 0, 10), ("w", "k", "v2", 15, 40), ("r", "k", "v1", 20, 30)) == (0, 0)
    assert judged(("w", "k", "v1", 0, 10), ("w", "k", "v2", 15, 40), ("r", "k", "v2", 20, 30)) == (0, 0)
    # v2 acknowledged after the read was sent: v1 still a candidate
    assert judged(("w", "k", "v1", 0, 10), ("w", "k", "v2", 15, 25), ("r", "k", "v1", 20, 30)) == (0, 0)


def test_write_two_after_write_five_was_acknowledged_is_stale() -> None:
    """The issue's case: a read that returns write #2 after write #5 was acknowledged."""
    writes = [("w", "k", f"v{i}", 100 * i, 100 * i + 50) for i in range(1, 6)]
    assert judged(*writes, ("r", "k", "v2", 600, 620)) == (1, 0)
    assert judged(*writes, ("r", "k", "v5", 600, 620)) == (0, 0)
    # writes overlapping each other do not supersede each other
    overlapping = [("w", "k", "a", 0, 100), ("w", "k", "b", 50, 150)]
    assert judged(*overlapping, ("r", "k", "a", 200, 210)) == (0, 0)


def test_a_write_of_unknown_outcome_stays_a_candidate_until_one_begun_after_its_retry_span_is_acked() -> None:
    unknown = ("w", "k", "u", 0, 500, False)  # gave up at 500
    assert judged(("w", "k", "v0", -20, -10), unknown, ("r", "k", "u", 10_000, 10_010)) == (0, 0)
    # the old value is a candidate too: the unknown write never acknowledged
    assert judged(("w", "k", "v0", -20, -10), unknown, ("r", "k", "v0", 10_000, 10_010)) == (0, 0)
    # a write begun inside its retry span does not supersede it
    assert judged(unknown, ("w", "k", "v1", 400, 600), ("r", "k", "u", 700, 710)) == (0, 0)
    # one begun after it and acknowledged before the read does
    assert judged(unknown, ("w", "k", "v1", 501, 600), ("r", "k", "u", 700, 710)) == (1, 0)


def test_what_a_write_answered_error_wrote_is_wrong() -> None:
    assert judged(("w", "k", "v1", 0, 10), ("w", "k", "bad", 20, 30, False, True), ("r", "k", "bad", 40, 50)) == (0, 1)
    # and it supersedes nothing
    assert judged(("w", "k", "v1", 0, 10), ("w", "k", "bad", 20, 30, False, True), ("r", "k", "v1", 40, 50)) == (0, 0)


def test_values_never_written_from_the_future_or_of_another_key_are_wrong() -> None:
    o = Oracle()
    o.write("k", "v1", 0, 10, acked=True)
    o.write("j", "vj", 0, 10, acked=True)
    o.write("k", "later", 100, 110, acked=True)
    o.read("k", "never", 20, 30)
    o.read("k", "vj", 20, 30)
    o.read("k", "later", 20, 30)
    v = o.verdict()
    assert (v.stale, v.wrong, v.reads) == (0, 3, 3)
    whys = [f.why for f in v.findings]
    assert "no write" in whys[0] and "another key ('j')" in whys[1] and "after the read returned" in whys[2]


def test_absent_and_deletes() -> None:
    assert judged(("r", "k", ABSENT, 0, 10)) == (0, 0)  # never written
    assert judged(("w", "k", "v1", 0, 10), ("r", "k", ABSENT, 20, 30)) == (1, 0)  # lost after its ack
    assert judged(("w", "k", "v1", 0, 10), ("w", "k", ABSENT, 20, 30), ("r", "k", ABSENT, 40, 50)) == (0, 0)
    assert judged(("w", "k", "v1", 0, 10), ("w", "k", ABSENT, 20, 30), ("r", "k", "v1", 40, 50)) == (1, 0)
    # a delete superseded by a later put
    assert judged(("w", "k", ABSENT, 0, 10), ("w", "k", "v1", 20, 30), ("r", "k", ABSENT, 40, 50)) == (1, 0)


def test_initial_values_are_candidates_until_the_first_acknowledged_write() -> None:
    o = Oracle(initial=lambda _k, v: v in (ABSENT, "old"))
    o.read("k", "old", 0, 5)
    o.write("k", "v1", 10, 20, acked=True)
    o.read("k", "old", 15, 25)  # sent before the ack: fine
    o.read("k", "old", 30, 40)  # after: stale
    v = o.verdict()
    assert (v.reads, v.stale, v.wrong) == (3, 1, 0)
    assert "before the run" in v.findings[0].why


def test_verdicts_judge_each_read_once_against_every_write_so_far() -> None:
    o = Oracle()
    o.write("k", "v1", 0, 10, acked=True)
    o.read("k", "v1", 20, 30)
    assert o.verdict().reads == 1
    o.write("k", "v2", 40, 50, acked=True)
    o.read("k", "v1", 60, 70)
    v = o.verdict()
    assert (v.reads, v.stale) == (1, 1)


def test_histories_of_several_hosts_merge_into_one_timeline(tmp_path) -> None:  # noqa: ANN001
    """A write on one host and a stale read on another: only the merged history shows it."""
    a = [{"client": 0, "key": "k", "op": "put", "value": "v1", "call": 0, "return": 10},
         {"client": 0, "key": "k", "op": "put", "value": "v2", "call": 20, "return": 30},
         {"client": 0, "key": "k", "op": "put", "value": "v3", "call": 35, "return": None, "end": 90},
         {"client": 0, "key": "k", "op": "put", "value": "bad", "call": 36, "return": 37, "error": True},
         {"client": 0, "key": "k", "op": "get", "value": None, "call": 38, "return": None}]  # fmt: skip
    b = [{"client": 1, "key": "k", "op": "get", "value": "v1", "call": 40, "return": 50, "served_by": 3},
         {"client": 1, "key": "k", "op": "get", "value": "v3", "call": 40, "return": 50}]  # fmt: skip
    for name, recs in (("a", a), ("b", b)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    v = check_history([tmp_path / "a.jsonl", tmp_path / "b.jsonl"])
    assert (v.reads, v.stale, v.wrong) == (2, 1, 0)
    assert v.findings[0].read.served_by == 3 and "switch 3" in str(v.findings[0])
    alone = Oracle()
    feed(alone, b)
    assert alone.verdict().wrong == 2  # without the writes, nothing it read was ever written


def _fed(*records: dict) -> tuple[int, int]:
    o = Oracle()
    feed(o, [{"client": 0, **r} for r in records])
    v = o.verdict()
    return v.stale, v.wrong


def test_incr_writes_the_number_it_answered_and_one_whose_answer_never_came_some_number() -> None:
    incr1 = {"key": "n", "op": "incr", "value": "1", "call": 0, "return": 10}
    incr2 = {"key": "n", "op": "incr", "value": "2", "call": 20, "return": 30}
    assert _fed(incr1, incr2, {"key": "n", "op": "get", "value": "2", "call": 40, "return": 50}) == (0, 0)
    assert _fed(incr1, incr2, {"key": "n", "op": "get", "value": "1", "call": 40, "return": 50}) == (1, 0)
    assert _fed(incr1, {"key": "n", "op": "get", "value": "7", "call": 40, "return": 50}) == (0, 1)
    lost = {"key": "n", "op": "incr", "value": None, "call": 20, "return": None, "end": 500}
    assert _fed(incr1, lost, {"key": "n", "op": "get", "value": "2", "call": 40, "return": 50}) == (0, 0)
    # ... until a write begun after its client gave up is acknowledged
    put = {"key": "n", "op": "put", "value": "v", "call": 600, "return": 610}
    assert _fed(incr1, lost, put, {"key": "n", "op": "get", "value": "2", "call": 700, "return": 710}) == (1, 0)


def test_an_hset_makes_a_read_answer_wrongtype_and_one_answered_wrongtype_wrote_nothing() -> None:
    put = {"key": "k", "op": "put", "value": "old", "call": 0, "return": 10}
    hset = {"key": "k", "op": "hset", "value": "f1", "call": 20, "return": 30}
    read_hash = {"key": "k", "op": "get", "value": None, "wrongtype": True, "call": 40, "return": 50}
    read_old = {"key": "k", "op": "get", "value": "old", "call": 40, "return": 50}
    assert _fed(put, hset, read_hash) == (0, 0)
    assert _fed(put, hset, read_old) == (1, 0)  # the string the HSET replaced, from a stale copy
    refused = {**hset, "wrongtype": True}  # HSET over the string: nothing written
    assert _fed(put, refused, read_old) == (0, 0)
    assert _fed(put, refused, read_hash) == (0, 1)
