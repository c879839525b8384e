"""The actions that hand the model something to read without being a typed message:
inject_context_action (a message steered into a run), subscription_notification_action (external
notifications) and a variant newer than this server's schema.

Field numbers from the GOL schema (docs/dialect.md "Actions"). A client that sends an injection
on a running stream waits for `context_injection_state` (InteractionUpdate 23) and, without
one, sends the same text again as a follow-up; so the answer goes out the moment the injection
is taken in, exactly once.
"""

from __future__ import annotations

from google.protobuf.unknown_fields import UnknownFieldSet  # type: ignore[import-untyped,unused-ignore]

from ...llm.types import TextContent, UserMessage
from .proto import agent_pb2
from .user_message import decode_user_message
from .values import FollowUp, InjectContext, Notifications, UnknownAction

# The most of a system-context injection's text the model reads (a producer is not the user;
# its text is bounded like any other note).
MAX_SYSTEM_CONTEXT_CHARS = 50_000


def inject_context(ica: agent_pb2.InjectContextAction) -> InjectContext:
    """The injected message: the user's own (user_context), or a producer's text marked as
    such (system_context). An injection with no payload is an empty message."""
    which = ica.WhichOneof("payload")
    message = UserMessage(content=())
    if which == "user_context" and ica.user_context.HasField("user_message"):
        message = decode_user_message(ica.user_context.user_message)
    elif which == "system_context":
        sc = ica.system_context
        producer = sc.producer or "unnamed"
        text = sc.content[:MAX_SYSTEM_CONTEXT_CHARS]
        message = UserMessage(
            content=(
                TextContent(
                    text=(
                        f"(Context injected by {producer}, not typed by the user:)\n"
                        f"<system_context_injection>\n{text}\n</system_context_injection>"
                    )
                ),
            )
        )
    return InjectContext(
        message=message,
        injection_id=ica.injection_id,
        expected_run_id=ica.expected_run_id,
    )


def notifications(action: agent_pb2.SubscriptionNotificationAction) -> Notifications:
    return Notifications(messages=tuple(decode_user_message(um) for um in action.notifications))


def notifications_message(notes: Notifications) -> UserMessage | None:
    """The run's user message for a subscription_notification_action: each notification's
    content after one line saying where it came from; None when there is none."""
    parts = [c for m in notes.messages for c in m.content]
    if not parts:
        return None
    header = TextContent(
        text=(
            f"(The user's subscriptions sent {len(notes.messages)} notification"
            f"{'' if len(notes.messages) == 1 else 's'}; act on them if they need it:)"
        )
    )
    return UserMessage(content=(header, *parts))


def unknown_action(action: agent_pb2.ConversationAction) -> UnknownAction:
    """The field numbers a newer IDE set on the action (for the one log line)."""
    unknown = UnknownFieldSet(action)
    numbers = {unknown[i].field_number for i in range(len(unknown))}
    return UnknownAction(field_numbers=tuple(sorted(numbers)))


def injection_state(injection_id: str, *, delivered: bool, reason: str = "") -> bytes:
    """InteractionUpdate.context_injection_state: delivered, or rejected with `reason`."""
    state = agent_pb2.ContextInjectionState()
    if delivered:
        state.delivered.SetInParent()
    else:
        state.rejected.reason = reason
    iu = agent_pb2.InteractionUpdate(
        context_injection_state=agent_pb2.ContextInjectionStateUpdate(
            injection_id=injection_id, state=state
        )
    )
    return agent_pb2.AgentServerMessage(interaction_update=iu).SerializeToString()


def injected_follow_up(ica: agent_pb2.InjectContextAction) -> FollowUp:
    """An injection on a running stream: it joins the run like a follow-up (before the turn's
    next model call, or as the next turn when the run is between turns), answered delivered
    [U: the IDE may want `queued` first and `delivered` at the model call; delivered at once
    is what stops a client from sending it again]."""
    injected = inject_context(ica)
    return FollowUp(
        message=injected.message,
        acknowledge=(injection_state(ica.injection_id, delivered=True),),
    )
