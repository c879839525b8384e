"""The IDE's model parameters: the thinking picker AvailableModels describes for a model, and
the effort a run's `requested_model.parameters` asks for.

Parameter ids seen in captures (tests/fixtures/cursor, every run request's requested_model and
selected_subagent_models): `effort` (low … xhigh), `reasoning` (the same levels, on OpenAI
models), `thinking` (true / false), `fast`, `context`. We publish one enum parameter, `effort`,
with the efforts a model offers (`Model.efforts`), and read any of the three back.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...llm.models import Model
from .proto import agent_pb2, aiserver_pb2

EFFORT_PARAMETER = "effort"
# Parameter ids whose value is an effort level; `thinking` is a switch.
EFFORT_IDS = ("effort", "reasoning")
THINKING_ID = "thinking"
MAX_PARAMETER_VALUE = 32

_PD = aiserver_pb2.ModelParameterDefinition
_AM = aiserver_pb2.AvailableModelsResponse


def _label(effort: str) -> str:
    return "Extra high" if effort == "xhigh" else effort.capitalize()


def parameter_definitions(model: Model) -> list[aiserver_pb2.ModelParameterDefinition]:
    """The thinking picker of `model`: one enum parameter with the efforts it offers (none
    for a model that offers none)."""
    if not model.efforts:
        return []
    values = [
        _PD.EnumParameterDefinition.EnumParameterValue(value=e, display_name=_label(e))
        for e in model.efforts
    ]
    kind = _PD.ModelParameterType(enum_parameter=_PD.EnumParameterDefinition(values=values))
    return [
        _PD(
            id=EFFORT_PARAMETER,
            name="Thinking",
            markdown_tooltip="How much the model reasons before it answers.",
            parameter_type=kind,
            is_cycleable_by_hotkey=True,
        )
    ]


def variants(model: Model) -> list[aiserver_pb2.AvailableModelsResponse.ModelVariantConfig]:
    """One variant per effort (the configured default marked as the default choice) [U: which
    of definitions and variants the IDE's picker reads; both are sent]."""
    default = model.settings.reasoning_effort or (model.efforts[-1] if model.efforts else "")
    return [
        _AM.ModelVariantConfig(
            parameter_values=[
                agent_pb2.RequestedModel.ModelParameterValue(id=EFFORT_PARAMETER, value=e)
            ],
            display_name=f"{model.display_name} ({_label(e)})",
            is_max_mode=False,
            is_default_non_max_config=e == default,
        )
        for e in model.efforts
    ]


def requested_effort(parameters: Iterable[agent_pb2.RequestedModel.ModelParameterValue]) -> str:
    """The effort the run asks for ("" for none): an `effort` or `reasoning` value as given
    (lowercase, bounded), else `thinking=false` as "none". Whether the model offers it is the
    loop's to decide (loop/effort.py)."""
    values = {p.id: p.value.strip().lower()[:MAX_PARAMETER_VALUE] for p in parameters}
    for key in EFFORT_IDS:
        if values.get(key):
            return values[key]
    if values.get(THINKING_ID) == "false":
        return "none"
    return ""
