"""The model-name resolver: ids, aliases, case, the default model and the unknown-name error."""

from __future__ import annotations

import pytest

from cursor_byok.llm.model_names import (
    ModelNames,
    NameClash,
    Resolved,
    Unknown,
    UnknownDefault,
    Via,
)
from cursor_byok.llm.models import Model
from cursor_byok.llm.settings import ModelSettings, ProviderSettings

PROVIDER = ProviderSettings(name="p", api="faux", base_url="http://p.invalid")


def model(model_id: str, *aliases: str) -> Model:
    return Model(
        id=model_id,
        display_name=model_id,
        provider=PROVIDER,
        settings=ModelSettings(model=model_id),
        context_window=1000,
        prices=None,
        aliases=aliases,
    )


SONNET = model("sonnet", "claude-4-sonnet", "claude-sonnet-4")
LOCAL = model("qwen-local")


def resolved(names: ModelNames, name: str | None) -> tuple[str, Via]:
    found = names.resolve(name)
    assert isinstance(found, Resolved), found
    return found.model.id, found.via


def test_id_alias_and_case() -> None:
    names = ModelNames([SONNET, LOCAL])
    assert resolved(names, "sonnet") == ("sonnet", Via.ID)
    assert resolved(names, "claude-4-sonnet") == ("sonnet", Via.ALIAS)
    assert resolved(names, "Claude-Sonnet-4") == ("sonnet", Via.IGNORING_CASE)
    assert resolved(names, "QWEN-LOCAL") == ("qwen-local", Via.IGNORING_CASE)


def test_unknown_lists_served_models_with_aliases() -> None:
    names = ModelNames([SONNET, LOCAL])
    for asked in ("gpt-4", "default", None):
        found = names.resolve(asked)
        assert isinstance(found, Unknown)
        assert found.served == ("qwen-local", "sonnet (aliases: claude-4-sonnet, claude-sonnet-4)")
    unknown = names.resolve("gpt-4")
    assert isinstance(unknown, Unknown)
    assert unknown.message() == (
        "unknown model 'gpt-4'; this server offers: qwen-local, "
        "sonnet (aliases: claude-4-sonnet, claude-sonnet-4)"
    )
    assert (
        Unknown(None, ()).message()
        == "unknown model no model; this server offers: none are configured"
    )


def test_default_model_takes_names_not_served() -> None:
    names = ModelNames([SONNET, LOCAL], default="claude-4-sonnet")  # an alias names it too
    assert names.default is SONNET
    assert resolved(names, "qwen-local") == ("qwen-local", Via.ID)  # served names win
    assert resolved(names, "default") == ("sonnet", Via.DEFAULT)  # the IDE's Auto entry
    assert resolved(names, "gpt-4") == ("sonnet", Via.DEFAULT)
    assert resolved(names, None) == ("sonnet", Via.DEFAULT)
    # where a fallback would be wrong (a token's allowed models), the caller says so
    assert isinstance(names.resolve("gpt-4", use_default=False), Unknown)


def test_without_default_the_only_model_serves_a_request_without_a_name() -> None:
    names = ModelNames([LOCAL])
    assert resolved(names, None) == ("qwen-local", Via.ONLY)
    assert isinstance(names.resolve("default"), Unknown)  # as before aliases existed


def test_a_model_or_alias_named_default_serves_the_auto_entry() -> None:
    names = ModelNames([SONNET, model("auto-pick", "default")], default="sonnet")
    assert resolved(names, "default") == ("auto-pick", Via.ALIAS)


def test_ids_differing_only_in_case_stay_exact() -> None:
    names = ModelNames([model("Big"), model("big")])
    assert resolved(names, "Big") == ("Big", Via.ID)
    assert resolved(names, "big") == ("big", Via.ID)
    assert isinstance(names.resolve("BIG"), Unknown)  # ambiguous ignoring case


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (
            [SONNET, model("other", "claude-4-sonnet")],
            "'claude-4-sonnet' is already an alias of model 'sonnet'",
        ),
        ([SONNET, model("other", "Sonnet")], "'Sonnet' is already the id of model 'sonnet'"),
        ([model("other", "SONNET"), SONNET], "'SONNET' is already the id of model 'sonnet'"),
    ],
)
def test_clashing_aliases_are_refused(models: list[Model], message: str) -> None:
    with pytest.raises(NameClash) as err:
        ModelNames(models)
    assert str(err.value) == message and err.value.model_id == "other"


def test_an_alias_repeating_its_own_model_is_harmless() -> None:
    names = ModelNames([model("m", "M", "m-2", "M-2")])
    assert resolved(names, "M-2") == ("m", Via.ALIAS)


def test_default_must_be_served() -> None:
    with pytest.raises(UnknownDefault) as err:
        ModelNames([SONNET], default="gpt-4")
    assert err.value.unknown.asked == "gpt-4"
    assert "sonnet (aliases: claude-4-sonnet, claude-sonnet-4)" in str(err.value)
