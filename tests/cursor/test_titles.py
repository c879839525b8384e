"""A chat's title from the person's own words (transport/cursor/titles.py)."""

from __future__ import annotations

import pytest

from cursor_byok.transport.cursor.titles import agent_title, short_title, user_words

OMP_FIRST_TEXT = (
    "<system-reminder>\nYou are running in oh-my-pi. Today is 2026-12-01.\n"
    "Use the tools.\n</system-reminder>\nRefactor the parser module please, and add tests"
)
IDE_FIRST_TEXT = (
    "<user_info>\nOS Version: linux 6.1\nShell: bash\n</user_info>\n"
    '<attached_files>\n<file path="a.py">print(1)</file>\n</attached_files>\n'
    "<user_query>\nWhy does the build fail on CI?\n</user_query>"
)


@pytest.mark.parametrize(
    ("text", "title"),
    [
        (OMP_FIRST_TEXT, "Refactor the parser module please, and"),
        (IDE_FIRST_TEXT, "Why does the build fail on"),
        ("<system-reminder>only a reminder</system-reminder>", "New chat"),
        ("<system-reminder>\nan unclosed block\nfix the tests", "an unclosed block"),
        ("Plain words, no blocks", "Plain words, no blocks"),
        ("   \n\n  second line first  \nthird", "second line first"),
        ("Use <b>bold</b> in the README", "Use <b>bold</b> in the README"),
        ("<context>\n<a>x</a>\n</context>\n\nDeploy to staging", "Deploy to staging"),
        ("", "New chat"),
    ],
)
def test_the_title_is_the_persons_own_words(text: str, title: str) -> None:
    assert agent_title(text) == title


def test_user_words_drop_reminders_anywhere() -> None:
    text = "Fix it\n<system-reminder>todo list is empty</system-reminder>\nplease"
    assert user_words(text) == "Fix it\n\nplease"


def test_a_models_name_is_cut_like_any_title() -> None:
    assert (
        short_title('"Fixing the flaky login test on CI today."')
        == "Fixing the flaky login test on"
    )
    assert short_title("") == "New chat"
