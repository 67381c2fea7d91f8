"""The request parameters that choose how texts become tokens (prompt_name,
input_type, truncate, truncation_direction), checked and applied at the
tokenizer, the first stage of a model's text entry point.

A prompt is the sentence-transformers one: its text goes before the input
text, as `SentenceTransformer.encode(prompt_name=...)` puts it. The model's
prompts and default prompt come from its export record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from model_common.errors import ErrorKind, error_message
from model_common.options import DECLARATION

# The options' choices come from row_formats.json's text_options, the
# declaration the client and the gateway read too.
_DECLARED = {option["name"]: option for option in DECLARATION["text_options"]}
TRUNCATION_DIRECTIONS: tuple[str, ...] = tuple(_DECLARED["truncation_direction"]["choices"])
# input_type names a role; it picks the first of its prompts the model has
# (e5 calls its document prompt "passage"), and no prompt where it has none.
INPUT_TYPE_PROMPTS: Mapping[str, tuple[str, ...]] = {
    role: tuple(prompts) for role, prompts in _DECLARED["input_type"]["choices"].items()
}


@dataclass(frozen=True)
class TextOptions:
    prompt: str
    truncate: bool
    direction: str  # one of TRUNCATION_DIRECTIONS


@dataclass(frozen=True)
class Prompts:
    """A model's sentence-transformers prompts."""

    prompts: Mapping[str, str]
    default_name: str | None

    @classmethod
    def from_record(cls, fields: Mapping[str, object]) -> Prompts:
        prompts = fields.get("prompts") or {}
        default = fields.get("default_prompt_name")
        if not isinstance(prompts, dict) or not (default is None or default in prompts):
            raise ValueError(
                f"the export record's prompts {prompts!r} and default prompt {default!r} do "
                "not fit together; export the model again"
            )
        return cls({str(k): str(v) for k, v in prompts.items()}, default)

    def choices(self) -> str:
        return ", ".join(sorted(self.prompts)) if self.prompts else "none: the model has no prompts"


def _invalid(parameter: str, detail: str) -> str:
    return error_message(ErrorKind.INVALID_PARAMETER, detail, parameter)


def prompt_text(parameters: Mapping[str, object], prompts: Prompts) -> str:
    """The prompt text the request asks for; raises ValueError with the
    message that refuses it."""
    name = parameters.get("prompt_name")
    input_type = parameters.get("input_type")
    if name is not None and input_type is not None:
        raise ValueError(_invalid("prompt_name", "give prompt_name or input_type, not both"))
    if input_type is not None:
        if input_type not in INPUT_TYPE_PROMPTS:
            raise ValueError(
                _invalid(
                    "input_type",
                    f"unknown input_type {input_type!r} (expected one of "
                    f"{', '.join(INPUT_TYPE_PROMPTS)})",
                )
            )
        found = [p for p in INPUT_TYPE_PROMPTS[str(input_type)] if p in prompts.prompts]
        return prompts.prompts[found[0]] if found else ""
    if name is None:
        name = prompts.default_name
        return prompts.prompts[name] if name is not None else ""
    if not isinstance(name, str):
        raise ValueError(_invalid("prompt_name", f"must be {_DECLARED['prompt_name']['type']}"))
    if name not in prompts.prompts:
        raise ValueError(
            _invalid(
                "prompt_name", f"unknown prompt {name!r}; the model's prompts: {prompts.choices()}"
            )
        )
    return prompts.prompts[name]


def text_options(
    parameters: Mapping[str, object], prompts: Prompts, truncate_default: bool
) -> TextOptions | str:
    """The request's text options, or the message that refuses them.
    `parameters` are the request's parameters as Triton's JSON gives them."""
    try:
        prompt = prompt_text(parameters, prompts)
    except ValueError as error:
        return str(error)
    truncate = parameters.get("truncate", truncate_default)
    if not isinstance(truncate, bool):
        return _invalid("truncate", f"must be {_DECLARED['truncate']['type']}")
    direction = parameters.get("truncation_direction", _DECLARED["truncation_direction"]["default"])
    if direction not in TRUNCATION_DIRECTIONS:
        return _invalid(
            "truncation_direction",
            f"unknown direction {direction!r} (expected {' or '.join(TRUNCATION_DIRECTIONS)})",
        )
    return TextOptions(prompt, truncate, str(direction))
