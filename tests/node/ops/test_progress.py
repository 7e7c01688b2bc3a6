"""node/ops/progress.py: plain lines off a terminal (a tenth at a time), rich bars on one, and the silent Report."""

from __future__ import annotations

import io

import pytest

from node.ops.progress import Reporter, silent


def test_plain_lines_come_a_tenth_at_a_time() -> None:
    stream = io.StringIO()
    with Reporter(stream) as report:
        assert report.bars is False  # a StringIO is no terminal
        for done in range(0, 1001):
            report("replaying", done, 1000)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "replaying: 0/1000 (0%)" and lines[-1] == "replaying: 1000/1000 (100%)"
    assert len(lines) == 11


def test_an_unknown_total_is_one_line_and_steps_are_separate() -> None:
    stream = io.StringIO()
    with Reporter(stream) as report:
        report("litestream restore", 0, None)
        report("litestream restore", 0, None)
        report("moving", 0, 2)
        report("moving", 2, 2)
    assert stream.getvalue().splitlines() == ["litestream restore: 0", "moving: 0/2 (0%)", "moving: 2/2 (100%)"]


def test_bars_render_the_step_and_its_count() -> None:
    stream = io.StringIO()
    with Reporter(stream, bars=True) as report:
        report("unpacking", 5, 10)
        report("unpacking", 10, 10)
    shown = stream.getvalue()
    assert "unpacking" in shown and "10/10" in shown


def test_silent_shows_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    silent("x", 1, 2)
    assert capsys.readouterr() == ("", "")
