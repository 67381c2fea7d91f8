"""The tenants file: who may call the service through the edge (server/edge/).

    [[tenants]]
    name = "search"                    # in stats, logs and the x-tenant header Triton sees
    key_sha256 = ["9f86d0...", "..."]  # hex SHA-256 of each key (one string or a list)
    requests_per_second = 50           # the edge answers 429 / RESOURCE_EXHAUSTED beyond it
    texts_per_second = 400             # optional, likewise; absent: only requests are counted
    priority = "interactive"           # interactive | bulk: the Triton level the edge sets
    max_in_flight = 8                  # requests at Triton at once, per protocol
    models = ["all-MiniLM-L6-v2"]      # catalog names; NAME_tokens is allowed with NAME

With the catalog, a tenant may also read (metadata, config, readiness;
never infer on) the stages its models' entry points call, which tools such
as perf_analyzer read for an ensemble.

Keys are stored only as hashes: `printf %s "$KEY" | sha256sum`. A file
that cannot be enforced is refused as a whole, with every reason found,
each naming the line and the tenant, so a bad edit never half-applies.
Standard library only, like the launcher.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from server import toml

# Triton's priority levels as the model configs declare them
# (priority_levels: 2, harness/priority.py).
PRIORITIES = {"interactive": 1, "bulk": 2}
KEYS = ("name", "key_sha256", "requests_per_second", "priority", "max_in_flight", "models")
OPTIONAL_KEYS = ("texts_per_second",)
# Names go into Envoy cluster and stat names and a header: keep them plain.
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
HASH_PATTERN = re.compile(r"[0-9a-f]{64}")
# Triton model names (server/catalog.py's NAME_PATTERN).
MODEL_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
TOKENS_SUFFIX = "_tokens"
# By entry point, the input whose rows are a request's texts, which
# texts_per_second counts: TEXT, or NAME_tokens' token ids
# (model_repository/shared/embed*/config.pbtxt).
TEXT_INPUTS = {"": "TEXT", TOKENS_SUFFIX: "INPUT_IDS"}
# Beyond these the edge's token bucket and circuit breaker are no longer a
# bound worth having; a typo (an extra zero or three) is likelier.
MAX_REQUESTS_PER_SECOND = 100_000
MAX_TEXTS_PER_SECOND = 10_000_000
MAX_IN_FLIGHT = 10_000


@dataclass(frozen=True)
class Tenant:
    name: str
    key_hashes: tuple[str, ...]  # lowercase hex SHA-256
    requests_per_second: int
    priority: str  # a key of PRIORITIES
    max_in_flight: int
    models: tuple[str, ...]  # catalog names, as written
    # Rows of TEXT (INPUT_IDS for NAME_tokens) per second; None: not counted.
    texts_per_second: int | None = None
    # The stages its models' entry points call (the catalog's): readable,
    # never called; () without a catalog.
    stages: tuple[str, ...] = ()

    @property
    def triton_priority(self) -> int:
        return PRIORITIES[self.priority]

    def triton_models(self) -> dict[str, str]:
        """The Triton models it may call (each name and its token entry
        point), each with the input that holds its texts."""
        return {
            name + suffix: text_input
            for name in self.models
            for suffix, text_input in TEXT_INPUTS.items()
        }


@dataclass(frozen=True)
class Tenants:
    tenants: tuple[Tenant, ...]

    def by_hash(self) -> dict[str, str]:
        return {digest: t.name for t in self.tenants for digest in t.key_hashes}


# Each name a catalog serves, with the stages its entry points call
# (server.catalog.Catalog.stages).
CatalogStages = Mapping[str, tuple[str, ...]]


def read_tenants(path: Path, catalog: CatalogStages | None = None) -> Tenants | list[str]:
    """The tenants in `path`, or every reason it is refused (each naming
    the file, the line and the tenant). `catalog`: to refuse a model the
    server does not serve, and to give each tenant its models' stages."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        return [f"{path}: cannot read: {error}"]
    return parse_tenants(text, str(path), catalog)


def parse_tenants(
    text: str, source: str, catalog: CatalogStages | None = None
) -> Tenants | list[str]:
    try:
        document = toml.loads(text)
    except toml.TOMLDecodeError as error:
        # tomllib's message already ends "(at line N, column M)".
        return [f"{source}: not valid TOML: {error}"]
    lines = _Lines(text)
    errors = [
        f"{source}:{lines.key_line(None, key)}: unknown key {key!r} (only [[tenants]] tables)"
        for key in document
        if key != "tenants"
    ]
    tables = document.get("tenants", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        return [*errors, f"{source}: 'tenants' must be [[tenants]] tables"]
    if not tables:
        errors.append(f"{source}: no [[tenants]]: the edge would refuse every request")
    tenants: list[tuple[int, Tenant]] = []
    for index, table in enumerate(tables):
        tenant = _tenant(table, index, lines, source, catalog)
        if isinstance(tenant, Tenant):
            tenants.append((index, tenant))
        else:
            errors.extend(tenant)
    errors.extend(_clashes(tenants, lines, source))
    return errors if errors else Tenants(tuple(tenant for _, tenant in tenants))


class _Lines:
    """Line numbers for messages: tomllib gives none for values, so each
    [[tenants]] header and each `key =` line under it is found in the text."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.headers = [
            number
            for number, line in enumerate(self.lines, start=1)
            if re.match(r"\s*\[\[\s*tenants\s*\]\]", line)
        ]

    def tenant_line(self, index: int) -> int:
        return self.headers[index] if index < len(self.headers) else 1

    def key_line(self, index: int | None, key: str) -> int:
        """The line of `key = ...` in tenant `index` (None: before any table)."""
        start = 0 if index is None else self.tenant_line(index)
        following = [h for h in self.headers if h > start]
        end = following[0] - 1 if following else len(self.lines)
        pattern = re.compile(rf"\s*[\"']?{re.escape(key)}[\"']?\s*=")
        for number in range(start + 1, end + 1):
            if pattern.match(self.lines[number - 1]):
                return number
        return max(start, 1)


# Reports a problem with one key of a tenant's table (None: the table).
_Report = Callable[[str | None, str], None]


def _tenant(
    table: dict[str, object],
    index: int,
    lines: _Lines,
    source: str,
    catalog: CatalogStages | None,
) -> Tenant | list[str]:
    label = table.get("name") if isinstance(table.get("name"), str) else f"#{index + 1}"
    errors: list[str] = []

    def error(key: str | None, reason: str) -> None:
        line = lines.tenant_line(index) if key is None else lines.key_line(index, key)
        errors.append(f"{source}:{line}: tenant {label!r}: {reason}")

    for key in table:
        if key not in KEYS and key not in OPTIONAL_KEYS:
            error(key, f"unknown key {key!r} (known: {', '.join(KEYS + OPTIONAL_KEYS)})")
    for key in KEYS:
        if key not in table:
            error(None, f"missing {key!r}")
    if errors:
        return errors

    name = table["name"]
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        error("name", "'name' must be 1-63 of a-z, 0-9, '_', '-', starting with a letter or digit")
    key_hashes = _key_hashes(table["key_sha256"], error)
    rate = _whole(table, "requests_per_second", MAX_REQUESTS_PER_SECOND, error)
    texts = (
        _whole(table, "texts_per_second", MAX_TEXTS_PER_SECOND, error)
        if "texts_per_second" in table
        else None
    )
    in_flight = _whole(table, "max_in_flight", MAX_IN_FLIGHT, error)
    priority = table["priority"]
    if priority not in PRIORITIES:
        error("priority", f"'priority' must be one of {', '.join(PRIORITIES)}, not {priority!r}")
    names = _models(table["models"], catalog, error)
    if errors:
        return errors
    assert isinstance(name, str) and isinstance(priority, str)
    assert rate is not None and in_flight is not None
    # An alias and its model's name share stages: each once.
    stages = () if catalog is None else tuple(dict.fromkeys(s for m in names for s in catalog[m]))
    return Tenant(name, key_hashes, rate, priority, in_flight, names, texts, stages)


def _key_hashes(raw: object, error: _Report) -> tuple[str, ...]:
    """key_sha256's hashes, lowercase, each once."""
    hashes = [raw] if isinstance(raw, str) else raw
    if not isinstance(hashes, list) or not hashes:
        error("key_sha256", "'key_sha256' must be a hex SHA-256 string or a non-empty list of them")
        return ()
    key_hashes: list[str] = []
    for digest in hashes:
        normal = digest.lower() if isinstance(digest, str) else ""
        if not HASH_PATTERN.fullmatch(normal):
            error("key_sha256", f"{digest!r} is not a hex SHA-256 (64 hex digits)")
        elif normal in key_hashes:
            error("key_sha256", f"key hash {normal[:12]}... is listed twice")
        else:
            key_hashes.append(normal)
    return tuple(key_hashes)


def _whole(table: dict[str, object], key: str, high: int, error: _Report) -> int | None:
    value = _bounded_int(table[key], high)
    if value is None:
        error(key, f"{key!r} must be a whole number in 1..{high}")
    return value


def _models(raw: object, catalog: CatalogStages | None, error: _Report) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        error("models", "'models' must be a non-empty list of model names")
        return ()
    for model in raw:
        if not isinstance(model, str) or not MODEL_PATTERN.fullmatch(model):
            error("models", f"{model!r} is not a Triton model name")
        elif catalog is not None and model not in catalog:
            error("models", f"model {model!r} is not in the catalog")
    return tuple(str(m) for m in raw)


def _bounded_int(value: object, high: int) -> int | None:
    # bool is an int in Python; `true` is no rate.
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        return None
    return value


def _clashes(tenants: list[tuple[int, Tenant]], lines: _Lines, source: str) -> list[str]:
    """Two tenants with one name or one key: the edge could not tell them apart."""
    errors: list[str] = []
    first_index: dict[str, int] = {}
    owner: dict[str, str] = {}
    for index, tenant in tenants:
        if tenant.name in first_index:
            line = lines.key_line(index, "name")
            errors.append(f"{source}:{line}: tenant {tenant.name!r} is defined twice")
        first_index.setdefault(tenant.name, index)
        for digest in tenant.key_hashes:
            if digest in owner and owner[digest] != tenant.name:
                line = lines.key_line(index, "key_sha256")
                errors.append(
                    f"{source}:{line}: tenant {tenant.name!r}: key hash {digest[:12]}... "
                    f"is also tenant {owner[digest]!r}'s"
                )
            owner.setdefault(digest, tenant.name)
    return errors
