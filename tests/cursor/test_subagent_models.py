"""Task's model choice (transport/cursor/tools/subagents.py `choose_model`) and the machine's
answer to a model we do not serve: an error result at once, nothing sent to the client."""

from __future__ import annotations

from cursor_byok.llm.types import ToolCall
from cursor_byok.loop.context import SubagentModel, SubagentOverride, Subagents
from cursor_byok.transport.cursor.tools import machine_for
from cursor_byok.transport.cursor.tools.subagents import ModelChoice, choose_model

LISTED = Subagents(
    models=(SubagentModel(name="composer-2.5", model="composer-test"),),
    overrides=(
        SubagentOverride(subagent_type="shell", model="composer-2.5"),
        SubagentOverride(subagent_type="explore", inherit=True),
        SubagentOverride(subagent_type="bugbot", disabled=True),
        SubagentOverride(subagent_type="debug", unserved="gpt-9"),
    ),
)


def test_a_listed_model_is_sent_by_the_clients_name() -> None:
    assert choose_model("composer-2.5", "generalPurpose", LISTED, "brain-1") == ModelChoice(
        name="composer-2.5"
    )
    # Our own id of a listed model, and other capitals, name it too.
    assert choose_model("Composer-Test", "generalPurpose", LISTED, "brain-1").name == (
        "composer-2.5"
    )


def test_inherit_or_nothing_is_the_parents_model() -> None:
    assert choose_model("inherit", "generalPurpose", LISTED, "brain-1").name == "brain-1"
    assert choose_model(None, "generalPurpose", LISTED, "brain-1").name == "brain-1"


def test_the_users_pin_for_a_type_wins() -> None:
    assert choose_model("inherit", "shell", LISTED, "brain-1").name == "composer-2.5"
    assert choose_model("composer-2.5", "explore", LISTED, "brain-1").name == "brain-1"
    assert "switched off bugbot" in choose_model(None, "bugbot", LISTED, "brain-1").error
    assert "'gpt-9'" in choose_model(None, "debug", LISTED, "brain-1").error


def test_an_unknown_model_is_an_error_listing_the_choices() -> None:
    choice = choose_model("claude-opus-5", "generalPurpose", LISTED, "brain-1")
    assert choice.name == ""
    assert choice.error == (
        "Error: this server does not serve the model 'claude-opus-5' for helpers. Choose one "
        "of: inherit, composer-2.5."
    )


def test_the_task_call_with_an_unknown_model_ends_at_once_and_sends_no_exec() -> None:
    call = ToolCall(
        id="call_1",
        name="Task",
        arguments={"description": "d", "prompt": "p", "model": "claude-opus-5"},
    )
    machine = machine_for(
        call, call_id="c", model_call_id="m", conversation_id="conv", subagents=LISTED
    )
    started = machine.start(lambda: 1, 0)
    assert len(started.frames) == 1  # tool_call_started only
    assert started.early is not None and started.early.result.is_error
    assert "does not serve the model 'claude-opus-5'" in started.early.result.text
