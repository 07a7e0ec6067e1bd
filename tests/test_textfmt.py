"""The shared number-or-dash formatting and log tails (autokernel/textfmt.py)."""

from __future__ import annotations

from autokernel.textfmt import TAIL_CHARS, number, tail


def test_number_formats_or_says_missing():
    assert number(1.23456) == "1.23"
    assert number(1234.5, ".1f", " us") == "1234.5 us"
    assert number(0.000123, ".2e") == "1.23e-04"
    assert number(None) == "-" and number(None, ".1f", "x") == "-"
    assert number(None, missing="not measured") == "not measured"
    assert number(0.0, ".2f", "x") == "0.00x"  # zero is a value, not a missing one


def test_tail_keeps_the_end_and_marks_the_cut():
    assert tail("short") == "short"
    text = "a" * 10 + "b" * TAIL_CHARS
    assert tail(text) == "..." + "b" * TAIL_CHARS
    assert tail("0123456789", 4) == "...6789"
    assert tail("  padded  ") == "  padded  "  # callers strip what they want stripped
