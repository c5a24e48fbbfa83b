"""xsweep.memo: bounded by count and bytes, least recently used out first, no errors kept,
consistent under threads, emptied by clear_memos."""

from __future__ import annotations

import threading

import pytest

from xsweep.memo import Memo, cached, clear_memos


def test_the_least_recently_used_go_first():
    memo: Memo = Memo(3)
    for key in "abc":
        memo.get(key, lambda key=key: key.upper())
    assert memo.get("a", lambda: "new") == "A"  # a hit: "a" is now the most recent
    memo.get("d", lambda: "D")
    assert len(memo) == 3
    assert memo.get("b", lambda: "made again") == "made again"  # "b" went, not "a"
    assert memo.get("a", lambda: "new") == "A"


def test_bounded_by_bytes():
    memo: Memo = Memo(100, max_bytes=10, weigh=lambda key, value: len(value))
    for key in range(6):
        memo.get(key, lambda: "xxxx")  # 4 bytes each: two fit in 10
    assert len(memo) == 2
    assert memo.get(5, lambda: "other") == "xxxx"
    assert memo.get(0, lambda: "other") == "other"


def test_errors_are_not_kept():
    memo: Memo = Memo(8)
    calls = []

    def fail():
        calls.append(1)
        raise ValueError("bad")

    for _ in range(2):
        with pytest.raises(ValueError):
            memo.get("k", fail)
    assert len(calls) == 2 and len(memo) == 0


def test_threads_see_one_value_per_key_and_the_bounds_hold():
    memo: Memo = Memo(20, max_bytes=1000, weigh=lambda key, value: 1)
    wrong = []

    def work(seed: int) -> None:
        for i in range(3000):
            key = (seed * 7 + i) % 50
            if memo.get(key, lambda key=key: key * key) != key * key:
                wrong.append(key)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong
    assert len(memo) <= 20 and memo._bytes == len(memo)


def test_clear_memos_empties_memos_and_cached_functions():
    memo: Memo = Memo(8)
    memo.get("k", lambda: 1)
    calls = []

    @cached(8)
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    assert square(3) == square(3) == 9 and calls == [3]
    clear_memos()
    assert len(memo) == 0
    assert square(3) == 9 and calls == [3, 3]


def test_cached_results_can_be_bounded_by_their_bytes():
    made = []

    @cached(100, max_bytes=10, weigh=len)
    def word(n: int) -> str:
        made.append(n)
        return "x" * n

    assert word(4) == "xxxx" and word(4) == "xxxx" and made == [4]  # kept
    word(5)
    word(3)  # 4 + 5 + 3 bytes: over 10, so the least recently used (4) goes
    word(5)
    assert made == [4, 5, 3]
    word(4)
    assert made == [4, 5, 3, 4]  # made again
    clear_memos()
    word(5)
    assert made == [4, 5, 3, 4, 5]  # emptied with every other memo
