"""What a multi-vector encoder's two tokenizer stages share (its texts', and a query's against
documents'): the model's tokenizer.json opened per role at the role's max length (and per way
of truncating), every request of an execute encoded in one batch-encode call per role and way,
and each request's encodings made into the rows its graph and its scoring read
(model_common.multivector). Importable only inside a Triton Python-backend stub."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import triton_python_backend_utils as pb_utils
from tokenizers import Encoding

from model_common.multivector import ROLES, MultiVectorRoles, Rows
from model_common.text_options import TRUNCATION_DIRECTIONS
from model_common.tokenizing import Row, Tokenizers, Truncation


@dataclass(frozen=True)
class RoleTexts:
    """Texts of one role, each after its prompt, and how they are truncated."""

    role: str
    texts: Sequence[Row]
    truncation: Truncation


class RoleTokenizers:
    def __init__(self, path: Path, roles: MultiVectorRoles) -> None:
        self._roles = roles
        self._by_role = {
            role: Tokenizers(path, TRUNCATION_DIRECTIONS, roles.max_length(role)) for role in ROLES
        }

    def encode(self, batch: Sequence[RoleTexts]) -> list[list[Encoding]]:
        """Each entry's encodings, in order: one batch-encode call per role and way."""
        encoded: list[list[Encoding]] = [[] for _ in batch]
        for role, tokenizers in self._by_role.items():
            indices = [index for index, entry in enumerate(batch) if entry.role == role]
            ran = tokenizers.encode([(batch[i].texts, batch[i].truncation) for i in indices])
            for index, encodings in zip(indices, ran, strict=True):
                encoded[index] = encodings
        return encoded

    def rows(
        self, entry: RoleTexts, encodings: Sequence[Encoding], named: Callable[[int], str]
    ) -> Rows | pb_utils.TritonError:
        """The entry's rows, or the refusal of a text over its role's max length where
        truncation is off."""
        if entry.truncation is None:
            refusal = self._by_role[entry.role].too_long(encodings, named)
            if refusal is not None:
                return refusal
        return self._roles.rows(entry.role, [encoding.ids for encoding in encodings])
