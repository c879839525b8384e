"""The limits of a person token, checked before each model call of a run made under it.

A run authenticated with a person token (`cursor-byok token add`) carries the token's id;
before each model call is sent (a new call and a resumed one alike) the runtime asks its
`Admissions`, which reads the token again from the store (a revocation, from any process or
replica, takes effect at the next call) and checks, in this order:

1. revoked or gone: `unauthenticated`;
2. the model a run asks for: the token's model names resolve as a client's do
   (llm/model_names.py); a model outside them is `permission_denied`. A fallback model or the
   compaction model the operator configured may serve the run (its calls count below);
3. a model without prices cannot be counted: a token with a budget may not call it;
4. the monthly budget and the rate: a call the loop plans with a commit (a new call, a
   fallback, a summary call) reserves an upper bound of its cost in that commit, and counts
   toward the rate there (reservations.py: one atomic step in the store, across processes and
   replicas; spent is `resource_exhausted`). A call resumed from the store (ResendLLM, or a
   resumed run's summary call), which commits nothing, reserves the same way in the write
   that plans it again (`Store.reserve_llm_call`, ModelCalls.resend), and counts toward the
   rate from then; a refusal there reaches the loop as the same admission input.

A call already sent finishes: nothing here stops a stream. A run without a token (the
server's own `auth_token`, or a loopback server without tokens) has no limits.

What a refusal means for the conversation is the loop's decision: `Admissions` answers each
model call a run's loop plans with an admission input (`loop.CallRefused`, or admitted), and
`loop.admit` decides (docs/loop.md, "Limits"); a reservation the store refuses becomes the
same input (`Admissions.refused`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ...llm.model_names import ModelNames, Resolved, Via
from ...llm.models import Model
from ...llm.stream import PreparedRequest
from ...loop import ADMITTED, Admission, CallLLM, CallRefused, Command, Limit, ResendLLM, Summarize
from ...store.api import AccessTokenRecord, Reservation, ReservationTotals, Store
from .reservations import RATE_WINDOW_MS, month_window, refusal_words, reservation


@dataclass(frozen=True, slots=True)
class Refusal:
    limit: Limit
    message: str


def allowed_ids(record: AccessTokenRecord, names: ModelNames) -> frozenset[str] | None:
    """The ids of the models a token may call (None: every model). A name that resolves only
    through the default model allows nothing: a scope never falls back."""
    if not record.models:
        return None
    ids: set[str] = set()
    for name in record.models:
        found = names.resolve(name)
        if isinstance(found, Resolved) and found.via is not Via.DEFAULT:
            ids.add(found.model.id)
    return frozenset(ids)


class TokenLimits:
    """Admits or refuses the model calls of runs made under person tokens."""

    def __init__(self, store: Store, names: ModelNames, now_ms: Callable[[], int]) -> None:
        self._store = store
        self._names = names
        self._now_ms = now_ms

    def now_ms(self) -> int:
        return self._now_ms()

    async def screen(
        self, token_id: str, model: Model, *, scoped: bool = True
    ) -> tuple[Refusal | None, AccessTokenRecord | None]:
        """The checks that need no sums (revoked, models, a budget on an unpriced model), and
        the token as read: the budget and the rate are then the reservation's, in the call's
        commit (reservations.py). `scoped=False`: a model the operator chose for the run (a
        fallback, the compaction model), outside the models limit."""
        record = await self._store.get_access_token(token_id)
        if record is None or record.revoked_at_ms is not None:
            who = f"token {record.name!r}" if record is not None else "this run's token"
            return Refusal(Limit.REVOKED, f"{who} was revoked; ask for a new one"), record
        allowed = allowed_ids(record, self._names)
        if scoped and allowed is not None and model.id not in allowed:
            return Refusal(
                Limit.MODELS,
                f"token {record.name!r} may not use model {model.id!r} "
                f"(its models limit: {', '.join(record.models)})",
            ), record
        if record.budget_usd is not None and model.prices is None:
            return _unpriced(record, model), record
        return None, record


async def person_of(store: Store, token_id: str | None) -> str | None:
    """The person a run's token belongs to (the first token of its chain of rotations): the
    owner of what the run starts. None for a run without a token: the operator's."""
    if token_id is None:
        return None
    record = await store.get_access_token(token_id)
    return record.person if record is not None else token_id


def _unpriced(record: AccessTokenRecord, model: Model) -> Refusal:
    return Refusal(
        Limit.BUDGET,
        f"token {record.name!r} has a monthly budget, and model {model.id!r} has no prices "
        "configured to count it against",
    )


class Admissions:
    """The admission answer for each model call of one run (a call on the run's model, on a
    fallback the loop names, or a compaction's summary call), once per call id. The token's
    models limit the model its runs ask for; the operator's fallbacks and compaction model may
    serve them (their cost counts like any other)."""

    def __init__(
        self,
        limits: TokenLimits,
        token_id: str | None,
        *,
        model: Model,
        summarizer: Model,
        models: Mapping[str, Model],
    ) -> None:
        self._limits = limits
        self.token_id = token_id
        self._model = model
        self._summarizer = summarizer
        self._models = models
        self._admitted: set[str] = set()  # call ids the token's limits let through
        self._record: AccessTokenRecord | None = None  # the token as last read

    def asks(self, command: Command) -> bool:
        """Whether `command` is a model call that needs an answer (never for a run without a
        token, nor for a call admitted before). Synchronous and O(1): it runs per input."""
        if self.token_id is None or not isinstance(command, CallLLM | ResendLLM | Summarize):
            return False
        return command.call_id not in self._admitted

    async def answer(self, command: CallLLM | ResendLLM | Summarize) -> Admission:
        """Admitted, or which of the token's limits refuses the call, in words naming it."""
        if self.token_id is None:
            return ADMITTED
        model = self._model_of(command)
        scoped = model.id == self._model.id
        refusal, self._record = await self._limits.screen(self.token_id, model, scoped=scoped)
        if refusal is not None:
            return CallRefused(
                call_id=command.call_id, limit=refusal.limit, message=refusal.message
            )
        self._admitted.add(command.call_id)
        return ADMITTED

    def _model_of(self, command: CallLLM | ResendLLM | Summarize) -> Model:
        if isinstance(command, Summarize):
            return self._summarizer
        named = self._models.get(command.model) if command.model else None
        return named or self._model

    def now_ms(self) -> int:
        return self._limits.now_ms()

    def reservation(self, command: Command, prepared: PreparedRequest | None) -> Reservation | None:
        """What the commit planning `command` (a model or summary call) reserves of the
        token's budget and rate, or what planning a call resumed from the store again
        reserves (ModelCalls.resend); None for a run without a token, or a token without
        either."""
        if self._record is None or prepared is None:
            return None
        if not isinstance(command, CallLLM | ResendLLM | Summarize):
            return None
        model = self._model_of(command)
        # A summary's or a description's own bound; a resent call reserves its model's (more).
        bound = 0 if isinstance(command, ResendLLM) else command.max_output_tokens
        return reservation(self._record, model, prepared, self._limits.now_ms(), bound)

    def refused(
        self,
        command: CallLLM | ResendLLM | Summarize,
        reserve: Reservation,
        totals: ReservationTotals,
    ) -> CallRefused:
        """The admission input for a call whose reservation the store refused."""
        assert self._record is not None
        self._admitted.discard(command.call_id)
        limit, message = refusal_words(self._record, reserve, totals, self._limits.now_ms())
        return CallRefused(call_id=command.call_id, limit=limit, message=message)


__all__ = [
    "RATE_WINDOW_MS",
    "Admissions",
    "Limit",
    "Refusal",
    "TokenLimits",
    "allowed_ids",
    "month_window",
    "person_of",
]
