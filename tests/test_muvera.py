"""MUVERA fixed-dimensional encodings (model_common/muvera.py) without a server: equal to
fastembed 0.9.1's Muvera (run in the export environment, tests/muvera_reference.py) on the
same random token vectors, for both roles and several parameter sets, the declared defaults
being fastembed's; and the MUVERA parameters checked as declared, at the tokenizer stage
(model_common.options) and in the client (embedding_client.options)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from embedding_client.errors import InvalidInputError
from embedding_client.options import MuveraOptions
from model_common.muvera import MuveraParameters, draw, encode_document, encode_query
from model_common.options import muvera_option_error, muvera_parameters

from harness.export_environment import run_in_export_environment
from server.paths import REPO_ROOT

# Same draws and float64 arithmetic: only a BLAS's summation order could differ.
TOLERANCE = 1e-6
# (k_sim, dim_proj, r_reps, seed, D); None: fastembed's defaults (5, 16, 20, 42). They cover a
# projection, none (dim_proj == D), one repetition, and more partitions than vectors.
PARAMETER_SETS: list[tuple[int, int, int, int, int] | None] = [
    None,
    (3, 8, 4, 7, 32),
    (2, 32, 3, 0, 32),
    (6, 4, 1, 123456789, 16),
]
DEFAULT_DIMS = 128
# Vectors per text: one, a few (most partitions empty), many.
LENGTHS = (1, 5, 60)
ROLES = ("query", "document")
VECTOR_DIM = 128


def _vectors(dims: int, seed: int) -> list[np.ndarray]:
    """Unit token vectors, as a late-interaction model's are, float32."""
    generator = np.random.default_rng(seed)
    texts = [generator.standard_normal((length, dims)).astype(np.float32) for length in LENGTHS]
    return [text / np.linalg.norm(text, axis=1, keepdims=True) for text in texts]


def _parameters(chosen: tuple[int, int, int, int, int] | None) -> dict[str, int]:
    if chosen is None:
        return {}
    k_sim, dim_proj, r_reps, seed, _ = chosen
    return {"k_sim": k_sim, "dim_proj": dim_proj, "r_reps": r_reps, "seed": seed}


@pytest.fixture(scope="module")
def cases() -> list[tuple[dict[str, Any], np.ndarray, np.ndarray]]:
    """(request, vectors, fastembed's encoding) for every parameter set, text and role, from
    one run of the reference."""
    requests = []
    for number, chosen in enumerate(PARAMETER_SETS):
        dims = DEFAULT_DIMS if chosen is None else chosen[4]
        for vectors in _vectors(dims, number):
            for role in ROLES:
                requests.append(({**_parameters(chosen), "role": role}, vectors))
    stdin = json.dumps([{**request, "vectors": vectors.tolist()} for request, vectors in requests])
    done = run_in_export_environment([str(REPO_ROOT / "tests" / "muvera_reference.py")], stdin)
    answers = json.loads(done.stdout)
    return [
        (request, vectors, np.asarray(answer))
        for (request, vectors), answer in zip(requests, answers, strict=True)
    ]


def test_the_encodings_equal_fastembeds(
    cases: list[tuple[dict[str, Any], np.ndarray, np.ndarray]],
) -> None:
    assert len(cases) == len(PARAMETER_SETS) * len(LENGTHS) * len(ROLES)
    for request, vectors, theirs in cases:
        # The declared defaults, where the request names none: fastembed's own.
        given = {f"muvera_{name}": value for name, value in request.items() if name != "role"}
        parameters = muvera_parameters(given)
        draws = draw(parameters, vectors.shape[1])
        encode = encode_query if request["role"] == "query" else encode_document
        ours = encode(vectors, draws)
        assert ours.shape == (parameters.width,) == theirs.shape, request
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOLERANCE, err_msg=str(request))


def test_a_document_without_vectors_encodes_as_zeros() -> None:
    draws = draw(MuveraParameters(k_sim=2, dim_proj=4, r_reps=3, seed=1), 8)
    assert not encode_document(np.zeros((0, 8), np.float32), draws).any()


def test_dim_proj_over_the_vectors_width_is_refused() -> None:
    with pytest.raises(ValueError, match="dim_proj 9 is over"):
        draw(MuveraParameters(k_sim=2, dim_proj=9, r_reps=1, seed=1), 8)


@pytest.mark.parametrize(
    ("parameters", "named", "detail"),
    [
        ({"muvera_k_sim": 0}, "muvera_k_sim", "in 1..8, got 0"),
        ({"muvera_k_sim": 9}, "muvera_k_sim", "in 1..8, got 9"),
        ({"muvera_dim_proj": VECTOR_DIM + 1}, "muvera_dim_proj", f"in 1..{VECTOR_DIM}, got"),
        ({"muvera_r_reps": 0}, "muvera_r_reps", "in 1..262144, got 0"),
        ({"muvera_seed": -1}, "muvera_seed", "got -1"),
        ({"muvera_r_reps": "20"}, "muvera_r_reps", "must be an integer"),
        ({"muvera_k_sim": True}, "muvera_k_sim", "must be an integer"),
        ({"muvera_k_sim": 8, "muvera_dim_proj": 128, "muvera_r_reps": 9}, "muvera_r_reps", "over"),
    ],
)
def test_a_bad_parameter_is_refused_naming_it(
    parameters: dict[str, object], named: str, detail: str
) -> None:
    message = muvera_option_error(parameters, VECTOR_DIM)
    assert message is not None and message.startswith(f"invalid_parameter '{named}': "), message
    assert detail in message, message
    # The client refuses it before sending, naming the same parameter.
    options = {name.removeprefix("muvera_"): value for name, value in parameters.items()}
    if named == "muvera_dim_proj":
        return  # the model's width is the server's to know
    with pytest.raises(InvalidInputError) as refused:
        MuveraOptions(**options)  # type: ignore[arg-type]
    assert refused.value.parameter == named


def test_good_parameters_pass_and_travel_as_declared() -> None:
    good = {"muvera_k_sim": 8, "muvera_dim_proj": 128, "muvera_r_reps": 8, "muvera_seed": 0}
    assert muvera_option_error(good, VECTOR_DIM) is None
    assert muvera_option_error({"dtype": "int8", "other": 1}, VECTOR_DIM) is None
    assert muvera_parameters(good).width == 8 * 256 * 128
    options = MuveraOptions(input_type="query", k_sim=3, seed=0)
    assert options.parameters() == {
        "dtype": "float32",
        "muvera_k_sim": 3,
        "muvera_seed": 0,
        "input_type": "query",
    }
