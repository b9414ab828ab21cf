"""`first_line`: the one way an exception becomes one line of a message."""

from __future__ import annotations

from autotune.errors import first_line


def test_first_line_is_the_first_line_that_says_something() -> None:
    assert first_line(ValueError("\n  bad value  \nmore detail")) == "bad value"


def test_a_blank_message_reads_as_its_type_or_the_given_default() -> None:
    assert first_line(KeyError()) == "KeyError"
    assert first_line(RuntimeError("  \n"), empty="") == ""
