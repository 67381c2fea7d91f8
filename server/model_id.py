"""`--model-id`: one Hub model served without a catalog file, as other
embedding servers take it. The launcher writes a one-entry catalog for it,
which everything that reads catalogs (the launcher, the edge, the gateway)
then reads as any other."""

from __future__ import annotations

import json

# The containers' settings (docker-compose.yml, the Helm chart): what
# --model-id and --revision default to.
MODEL_ID_VARIABLE = "EMBEDDING_MODEL_ID"
MODEL_REVISION_VARIABLE = "EMBEDDING_MODEL_REVISION"
# Written beside the served repository, rewritten at each start.
MODEL_ID_CATALOG = "model-id.toml"


def model_id_catalog(name: str, repo_id: str, revision: str, trust_pickle: bool) -> str:
    """The catalog of one Hub model, as TOML; the catalog reader checks it."""
    # A JSON string is a TOML basic string: quotes and escapes are the same.
    lines = [
        "# Written by the launcher for --model-id; rewritten at each start.",
        "[[models]]",
        f"name = {json.dumps(name)}",
        f"hub = {json.dumps(repo_id)}",
        f"revision = {json.dumps(revision)}",
        f"trust_pickle = {'true' if trust_pickle else 'false'}",
    ]
    return "\n".join(lines) + "\n"
