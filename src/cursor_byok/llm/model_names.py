"""The names a client may ask for, resolved to a served model: one resolver for every place a
model name arrives (run requests now; subagent models and token scopes later), so all of them
agree on what a name means.

Order: the exact model id, then an exact alias, then either of them ignoring case (only when
that names one model), then `server.default_model` when one is set, else an error that lists
every served model with its aliases. Names match case-insensitively because clients retype
them (Cursor's own CLI matches `--model` ignoring case); the exact forms go first so two ids
that differ only in case, which older configurations may hold, stay reachable.

The IDE's Auto entry asks for `default`: a model or alias named so serves it; otherwise
`default_model` does when set; otherwise it is an unknown name, like any other.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .models import Model

__all__ = ["ModelNames", "NameClash", "Resolved", "Unknown", "UnknownDefault", "Via"]


class Via(enum.Enum):
    """How a name found its model (callers that must not fall back check for DEFAULT)."""

    ID = "id"
    ALIAS = "alias"
    IGNORING_CASE = "ignoring case"  # an id or alias spelled with other capitals
    DEFAULT = "default"  # not a served name (or none given): server.default_model
    ONLY = "only"  # no name given and the server serves one model


@dataclass(frozen=True, slots=True)
class Resolved:
    model: Model
    via: Via


@dataclass(frozen=True, slots=True)
class Unknown:
    """A name no served model answers to; `served` lists each model with its aliases."""

    asked: str | None
    served: tuple[str, ...]

    def message(self) -> str:
        asked = repr(self.asked) if self.asked else "no model"
        known = ", ".join(self.served) or "none are configured"
        return f"unknown model {asked}; this server offers: {known}"


class NameClash(ValueError):
    """An alias that is already another model's id or alias."""

    def __init__(self, model_id: str, alias: str, other_id: str, other_is_alias: bool) -> None:
        what = "an alias" if other_is_alias else "the id"
        super().__init__(f"{alias!r} is already {what} of model {other_id!r}")
        self.model_id = model_id
        self.alias = alias


class UnknownDefault(ValueError):
    """A default model that no served model answers to."""

    def __init__(self, unknown: Unknown) -> None:
        super().__init__(unknown.message())
        self.unknown = unknown


class ModelNames:
    """Every name of the served models, checked once at start-up; `resolve` never raises."""

    def __init__(self, models: Iterable[Model], default: str | None = None) -> None:
        self._models: dict[str, Model] = {m.id: m for m in models}
        self._aliases: dict[str, Model] = {}
        folded: dict[str, tuple[Model, bool]] = {}  # casefolded name -> model, is an alias
        for model in self._models.values():
            folded.setdefault(model.id.casefold(), (model, False))
        for model in self._models.values():
            for alias in model.aliases:
                key = alias.casefold()
                holder, is_alias = folded.get(key, (model, True))
                if holder.id != model.id:
                    raise NameClash(model.id, alias, holder.id, is_alias)
                folded[key] = (holder, is_alias)
                self._aliases[alias] = model
        # Ids that differ only in case cannot be told apart ignoring case: exact only.
        counts = Counter(model_id.casefold() for model_id in self._models)
        ambiguous = {key for key, n in counts.items() if n > 1}
        self._folded: dict[str, Model] = {
            k: m for k, (m, _) in folded.items() if k not in ambiguous
        }
        self._default: Model | None = None
        if default is not None:
            found = self.resolve(default, use_default=False)
            if isinstance(found, Unknown):
                raise UnknownDefault(found)
            self._default = found.model

    @property
    def models(self) -> Mapping[str, Model]:
        """The served models by id, in the configuration's order."""
        return self._models

    @property
    def default(self) -> Model | None:
        """`server.default_model`, when set."""
        return self._default

    def served(self) -> tuple[str, ...]:
        """Each model as the error lists it: `id` or `id (aliases: a, b)`, by id."""
        return tuple(
            f"{m.id} (aliases: {', '.join(m.aliases)})" if m.aliases else m.id
            for m in sorted(self._models.values(), key=lambda m: m.id)
        )

    def resolve(self, name: str | None, *, use_default: bool = True) -> Resolved | Unknown:
        """The model `name` asks for. `use_default=False` for names that must be served
        ones (a token's allowed models), never a fallback."""
        if name:
            if (model := self._models.get(name)) is not None:
                return Resolved(model, Via.ID)
            if (model := self._aliases.get(name)) is not None:
                return Resolved(model, Via.ALIAS)
            if (model := self._folded.get(name.casefold())) is not None:
                return Resolved(model, Via.IGNORING_CASE)
        if use_default and self._default is not None:
            return Resolved(self._default, Via.DEFAULT)
        if not name and use_default and len(self._models) == 1:
            return Resolved(next(iter(self._models.values())), Via.ONLY)
        return Unknown(name, self.served())
