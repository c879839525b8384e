"""How a run's stream ends when it does not end well: a Connect error code, a message, and the
`aiserver.v1.ErrorDetails` the IDE reads to show it (title, retry affordance)."""

from __future__ import annotations

from dataclasses import dataclass

from .proto import aiserver_pb2

__all__ = [
    "Ending",
    "bad_request_end",
    "canceled_end",
    "internal_end",
    "model_not_allowed_end",
    "over_budget_end",
    "provider_error_end",
    "rate_limited_end",
    "token_revoked_end",
    "unavailable_end",
    "unimplemented_end",
]


@dataclass(frozen=True, slots=True)
class Ending:
    """A failed ending: Connect `code`, `message`, and serialized ErrorDetails (`details`)."""

    code: str
    message: str
    details: bytes


def _details(error: int, title: str, detail: str, *, retryable: bool, expected: bool) -> bytes:
    details = aiserver_pb2.ErrorDetails(
        error=error,  # type: ignore[arg-type]
        details=aiserver_pb2.CustomErrorDetails(
            title=title,
            detail=detail,
            is_retryable=retryable,
            show_request_id=True,
            should_show_immediate_error=False,
        ),
        is_expected=expected,
    )
    return bytes(details.SerializeToString(deterministic=True))


def provider_error_end(message: str) -> Ending:
    """The model provider failed: `unavailable`, shown with a retry affordance."""
    return Ending(
        "unavailable",
        message,
        _details(
            aiserver_pb2.ErrorDetails.ERROR_PROVIDER_ERROR,
            "Provider error",
            message,
            retryable=True,
            expected=False,
        ),
    )


def canceled_end(reason: str) -> Ending:
    return Ending(
        "canceled",
        reason,
        _details(
            aiserver_pb2.ErrorDetails.ERROR_USER_ABORTED_REQUEST,
            "Canceled",
            reason,
            retryable=False,
            expected=True,
        ),
    )


def bad_request_end(message: str) -> Ending:
    """A request this server cannot serve as sent (bad message, unknown model, ...). Connect
    code `invalid_argument`; an unknown model is tagged ERROR_BAD_MODEL_NAME."""
    unknown_model = message.startswith("unknown model")
    error = (
        aiserver_pb2.ErrorDetails.ERROR_BAD_MODEL_NAME
        if unknown_model
        else aiserver_pb2.ErrorDetails.ERROR_BAD_REQUEST
    )
    return Ending(
        "invalid_argument",
        message,
        _details(
            error,
            "Unknown model" if unknown_model else "Bad request",
            message,
            retryable=False,
            expected=True,
        ),
    )


def internal_end(message: str) -> Ending:
    return Ending(
        "internal",
        message,
        _details(
            aiserver_pb2.ErrorDetails.ERROR_INTERNAL,
            "Server error",
            message,
            retryable=True,
            expected=False,
        ),
    )


def unavailable_end(message: str, title: str) -> Ending:
    """This server cannot serve the run now, for a cause that passes (its storage full or busy):
    `unavailable`, shown with a retry affordance."""
    return Ending(
        "unavailable",
        message,
        _details(
            aiserver_pb2.ErrorDetails.ERROR_INTERNAL,
            title,
            message,
            retryable=True,
            expected=False,
        ),
    )


def unimplemented_end(message: str) -> Ending:
    """An action this server decodes but does not serve yet: Connect `unimplemented`, shown
    as a custom message naming the action (the IDE's button did nothing it could retry)."""
    return Ending(
        "unimplemented",
        message,
        _details(
            aiserver_pb2.ErrorDetails.ERROR_CUSTOM_MESSAGE,
            "Not supported by this server",
            message,
            retryable=False,
            expected=True,
        ),
    )


def over_budget_end(message: str) -> Ending:
    """A person token's monthly budget is spent: Connect `resource_exhausted` naming it. The
    IDE's reading of ERROR_RESOURCE_EXHAUSTED is [U]; the code and the message carry it."""
    return Ending(
        "resource_exhausted",
        message,
        _details(
            aiserver_pb2.ErrorDetails.ERROR_RESOURCE_EXHAUSTED,
            "Token budget spent",
            message,
            retryable=False,
            expected=True,
        ),
    )


def rate_limited_end(message: str) -> Ending:
    """A person token made more model calls in the last minute than it may: Connect
    `resource_exhausted`, retryable (a minute later it passes)."""
    return Ending(
        "resource_exhausted",
        message,
        _details(
            aiserver_pb2.ErrorDetails.ERROR_RATE_LIMITED,
            "Token rate limit",
            message,
            retryable=True,
            expected=True,
        ),
    )


def model_not_allowed_end(message: str) -> Ending:
    """A person token asked for a model outside its list: Connect `permission_denied`."""
    return Ending(
        "permission_denied",
        message,
        _details(
            aiserver_pb2.ErrorDetails.ERROR_MODEL_BLOCKED,
            "Model not allowed for this token",
            message,
            retryable=False,
            expected=True,
        ),
    )


def not_yours_end(message: str) -> Ending:
    """A person's token asked for a conversation or run another person's token started:
    Connect `permission_denied`."""
    return Ending(
        "permission_denied",
        message,
        _details(
            aiserver_pb2.ErrorDetails.ERROR_NOT_HIGH_ENOUGH_PERMISSIONS,
            "Not your conversation",
            message,
            retryable=False,
            expected=True,
        ),
    )


def token_revoked_end(message: str) -> Ending:
    """The person token of a run was revoked (or removed) while it ran: `unauthenticated`."""
    return Ending(
        "unauthenticated",
        message,
        _details(
            aiserver_pb2.ErrorDetails.ERROR_UNAUTHORIZED,
            "Token revoked",
            message,
            retryable=False,
            expected=True,
        ),
    )
