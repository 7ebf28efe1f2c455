"""Chat / SFT documents: a conversation's messages rendered as pieces of text, each
saying whether its tokens count for the loss.

A conversation is a JSONL line ``{"messages": [{"role": ..., "content": ...}, ...]}``
(the field name is an option). :class:`ChatTemplate`, the default, renders each
message as its role's begin special, its content and its role's end special::

    <|system|>Be terse.<|end_of_system|><|user|>Hi<|end_of_user|>
    <|assistant|>Hello<|end_of_assistant|>

(without the line break)
and trains only on the ``trained`` roles' content and end special (by default the
assistant's: ``Hello<|end_of_assistant|>``), so a model learns to answer and to end its
turn, never to write the prompt. The specials must be the tokenizer's
(:data:`CHAT_SPECIALS` holds the default template's: ``ByteTokenizer(CHAT_SPECIALS)``,
``BPETokenizer.train(..., specials=CHAT_SPECIALS)``). The assistant's two are
neuralnet.cpp's ``<|assistant|>`` / ``<|end_of_assistant|>``, so the rendered text is
what ``loss_scope="assistant"`` reads from a text corpus, the begin marker excepted:
it is the template's, not the model's, to write.

Any callable taking the list of messages (each a ``dict`` with a str ``role`` and
``content``) and returning ``(text, trained)`` pairs is a template too. Pieces are
tokenized one by one (a special's text becomes its id).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import DomainError

__all__ = ["CHAT_SPECIALS", "ChatTemplate", "checked_messages", "render"]

ASSISTANT, END_OF_ASSISTANT = "<|assistant|>", "<|end_of_assistant|>"
# The default template's specials, the assistant's pair first: they take ids 256, 257
# in a ByteTokenizer (its default specials) and 0, 1 in a trained BPE
CHAT_SPECIALS = (
    ASSISTANT,
    END_OF_ASSISTANT,
    "<|system|>",
    "<|end_of_system|>",
    "<|user|>",
    "<|end_of_user|>",
)

Pieces = list[tuple[str, bool]]


def _strs(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"ChatTemplate.{name} must be a sequence of str, got {value!r}")
    out = tuple(value)
    if not all(isinstance(v, str) and v for v in out) or len(set(out)) != len(out):
        raise DomainError(f"ChatTemplate.{name} must hold distinct non-empty str, got {out!r}")
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class ChatTemplate:
    """Each message as ``begin`` + content + ``end`` (``{role}`` filled in); loss on
    the content and end of the ``trained`` roles. A role not in ``roles`` is an error."""

    roles: tuple[str, ...] = ("system", "user", "assistant")
    trained: tuple[str, ...] = ("assistant",)
    begin: str = "<|{role}|>"
    end: str = "<|end_of_{role}|>"

    def __post_init__(self) -> None:
        object.__setattr__(self, "roles", _strs("roles", self.roles))
        object.__setattr__(self, "trained", _strs("trained", self.trained))
        unknown = [r for r in self.trained if r not in self.roles]
        if unknown:
            raise DomainError(
                f"ChatTemplate.trained names roles {unknown} that are not in roles {self.roles}"
            )
        for name in ("begin", "end"):
            v = getattr(self, name)
            if not isinstance(v, str) or "{role}" not in v:
                raise DomainError(
                    f"ChatTemplate.{name} must be a str holding '{{role}}', got {v!r}"
                )

    def markers(self) -> list[str]:
        """Every role's begin and end text: each must be one special of the tokenizer."""
        return [m.format(role=r) for r in self.roles for m in (self.begin, self.end)]

    def __call__(self, messages: list[dict[str, Any]]) -> Pieces:
        pieces: Pieces = []
        for m in messages:
            role = m["role"]
            trained = role in self.trained
            pieces.append((self.begin.format(role=role), False))
            pieces.append((m["content"], trained))
            pieces.append((self.end.format(role=role), trained))
        return pieces


def checked_messages(
    line: Any, field: str, roles: tuple[str, ...] | None
) -> tuple[list[dict[str, Any]] | None, str]:
    """The messages of one parsed JSONL line, or None and what is wrong with them: an
    object with a list ``field`` of objects with str ``role`` (one of ``roles`` unless
    None) and str ``content``."""
    if not isinstance(line, dict):
        return None, f"expected a JSON object with a {field!r} list, found {type(line).__name__}"
    messages = line.get(field)
    if not isinstance(messages, list):
        found = "no such field" if field not in line else type(messages).__name__
        return None, f"expected a {field!r} list of messages, found {found}"
    for i, m in enumerate(messages):
        where = f"message {i}"
        if not isinstance(m, dict):
            return None, f"{where}: expected an object, found {type(m).__name__}"
        for key in ("role", "content"):
            if key not in m:
                return None, f"{where}: expected a {key!r} field, found keys {sorted(m)}"
            if not isinstance(m[key], str):
                return None, f"{where}: {key!r} must be a str, found {type(m[key]).__name__}"
        if roles is not None and m["role"] not in roles:
            return None, f"{where}: unknown role {m['role']!r} (the template's are {list(roles)})"
    return messages, ""


def render(template: Callable[[list[dict[str, Any]]], Any], messages: list[dict]) -> Pieces:
    """``template(messages)`` checked: a list of ``(str, bool)`` pairs (a ``ValueError``
    saying what came back otherwise)."""
    pieces = template(messages)
    if not isinstance(pieces, (list, tuple)):
        raise DomainError(
            f"the chat template returned {type(pieces).__name__}, expected a list of "
            "(text, trained) pairs"
        )
    for i, p in enumerate(pieces):
        if not (
            isinstance(p, tuple)
            and len(p) == 2
            and isinstance(p[0], str)
            and isinstance(p[1], bool)
        ):
            raise DomainError(
                f"the chat template's piece {i} is {p!r}, expected a (str, bool) pair"
            )
    return list(pieces)
