"""The tenants file (server/tenants.py): what it accepts and how it refuses,
naming the line and the tenant; and what the edge renders from it."""

from __future__ import annotations

import hashlib
from pathlib import Path

from server.catalog import DEFAULT_CATALOG, Catalog, CatalogModel, read_catalog
from server.edge.config import TEXTS_FILTER, EdgePorts
from server.edge.routes import lua_tables, routes
from server.edge.xds import dynamic_files
from server.tenants import MAX_TEXTS_PER_SECOND, Tenants, parse_tenants, read_tenants

HASH_A = hashlib.sha256(b"key-a").hexdigest()
HASH_B = hashlib.sha256(b"key-b").hexdigest()

GOOD = f"""
[[tenants]]
name = "search"
key_sha256 = "{HASH_A}"
requests_per_second = 50
priority = "interactive"
max_in_flight = 8
models = ["all-MiniLM-L6-v2", "embed"]

[[tenants]]
name = "indexer"
key_sha256 = ["{HASH_B}"]
requests_per_second = 5
texts_per_second = 40
priority = "bulk"
max_in_flight = 2
models = ["embed"]
"""


def parsed(text: str) -> Tenants | list[str]:
    return parse_tenants(text, "tenants.toml")


def errors(text: str) -> list[str]:
    result = parsed(text)
    assert isinstance(result, list), result
    return result


def test_a_good_file() -> None:
    tenants = parsed(GOOD)
    assert isinstance(tenants, Tenants)
    search, indexer = tenants.tenants
    assert search.key_hashes == (HASH_A,) and search.triton_priority == 1
    assert indexer.triton_priority == 2 and indexer.max_in_flight == 2
    assert search.texts_per_second is None and indexer.texts_per_second == 40
    assert search.triton_models() == {
        "all-MiniLM-L6-v2": "TEXT",
        "all-MiniLM-L6-v2_tokens": "INPUT_IDS",
        "embed": "TEXT",
        "embed_tokens": "INPUT_IDS",
    }
    assert tenants.by_hash() == {HASH_A: "search", HASH_B: "indexer"}


def test_uppercase_hashes_are_the_same_key() -> None:
    tenants = parsed(GOOD.replace(HASH_A, HASH_A.upper()))
    assert isinstance(tenants, Tenants)
    assert tenants.tenants[0].key_hashes == (HASH_A,)


def test_toml_syntax_error_names_the_line() -> None:
    (message,) = errors(GOOD.replace("max_in_flight = 2", "max_in_flight = = 2"))
    assert "tenants.toml: not valid TOML" in message and "line 16" in message


def test_unknown_key_names_line_and_tenant() -> None:
    (message,) = errors(GOOD.replace("max_in_flight = 2", "max_in_flight = 2\nburst = 4"))
    assert message.startswith("tenants.toml:17: tenant 'indexer': unknown key 'burst'")
    assert "texts_per_second" in message  # among the keys it knows


def test_unknown_top_level_key() -> None:
    (message,) = errors("admin = true\n" + GOOD)
    assert message.startswith("tenants.toml:1: unknown key 'admin'")


def test_missing_key() -> None:
    (message,) = errors(GOOD.replace('priority = "bulk"\n', ""))
    assert message == "tenants.toml:10: tenant 'indexer': missing 'priority'"


def test_colliding_keys_are_an_error() -> None:
    (message,) = errors(GOOD.replace(HASH_B, HASH_A))
    assert message.startswith("tenants.toml:12: tenant 'indexer': key hash")
    assert "also tenant 'search'" in message


def test_a_key_listed_twice_in_one_tenant() -> None:
    (message,) = errors(GOOD.replace(f'["{HASH_B}"]', f'["{HASH_B}", "{HASH_B}"]'))
    assert "listed twice" in message


def test_duplicate_names() -> None:
    (message,) = errors(GOOD.replace('name = "indexer"', 'name = "search"'))
    assert message == "tenants.toml:11: tenant 'search' is defined twice"


def test_bad_values_are_each_reported() -> None:
    text = (
        GOOD.replace('"bulk"', '"urgent"')
        .replace("requests_per_second = 5\n", "requests_per_second = true\n")
        .replace("max_in_flight = 2", "max_in_flight = 0")
        .replace(f'["{HASH_B}"]', '["not-a-hash"]')
        .replace('models = ["embed"]', 'models = ["../etc"]')
    )
    found = errors(text)
    assert len(found) == 5, found
    for needle in ("'priority'", "'requests_per_second'", "'max_in_flight'", "not a hex", "../etc"):
        assert any(needle in message and "'indexer'" in message for message in found), needle


def test_texts_per_second_must_be_a_positive_whole_number() -> None:
    for bad in ("0", "-3", "2.5", '"40"', "true", str(MAX_TEXTS_PER_SECOND + 1)):
        (message,) = errors(GOOD.replace("texts_per_second = 40", f"texts_per_second = {bad}"))
        assert message == (
            f"tenants.toml:14: tenant 'indexer': 'texts_per_second' must be a whole number "
            f"in 1..{MAX_TEXTS_PER_SECOND}"
        ), bad


def test_empty_key_list_and_empty_models() -> None:
    found = errors(GOOD.replace(f'["{HASH_B}"]', "[]").replace('models = ["embed"]', "models = []"))
    assert len(found) == 2, found


def test_no_tenants_is_refused() -> None:
    (message,) = errors("")
    assert "no [[tenants]]" in message


def test_models_not_in_the_catalog(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text(GOOD)
    result = read_tenants(path, {"all-MiniLM-L6-v2": ("tokenizer",)})
    assert isinstance(result, list)
    assert any("'embed' is not in the catalog" in message for message in result)


def test_a_tenant_may_read_the_stages_its_models_call(tmp_path: Path) -> None:
    """Each model's stages as the served repository names them (the catalog's),
    an alias's being its model's; only with a catalog."""
    packaged = read_catalog(DEFAULT_CATALOG)
    assert isinstance(packaged, Catalog), packaged
    folder = tmp_path / "model"
    models = (
        *packaged.models,
        CatalogModel("e5", folder, ("e5-alias",)),
        CatalogModel("ranker", folder, task="rerank"),
        CatalogModel("splade", folder, task="sparse"),
    )
    stages = Catalog(DEFAULT_CATALOG, models).stages()
    assert (
        stages["embed"]
        == stages["all-MiniLM-L6-v2"]
        == ("tokenizer", "embedder", "embedder_engine", "serializer")
    )
    assert stages["e5-alias"] == stages["e5"] == ("e5.tokenizer", "e5.embedder", "serializer")
    # A reranker's ensemble ends in its scorer; a sparse encoder's in its serializer.
    assert stages["ranker"] == ("ranker.tokenizer", "ranker.scorer")
    assert stages["splade"] == ("splade.tokenizer", "splade.encoder", "sparse_serializer")
    tenants = parse_tenants(GOOD, "tenants.toml", stages)
    assert isinstance(tenants, Tenants), tenants
    search, indexer = tenants.tenants
    # Named by the model and by its alias: each stage once.
    assert search.stages == indexer.stages == stages["embed"]
    assert '["search"] = {["tokenizer"] = true, ["embedder"] = true' in lua_tables(tenants)
    without = parsed(GOOD)
    assert isinstance(without, Tenants)
    assert 'local STAGES = {["search"] = {}, ["indexer"] = {}}' in lua_tables(without)


def test_unreadable_file(tmp_path: Path) -> None:
    (message,) = read_tenants(tmp_path / "absent.toml")  # type: ignore[misc]
    assert "cannot read" in message


def test_rendered_config_holds_hashes_not_keys() -> None:
    tenants = parsed(GOOD)
    assert isinstance(tenants, Tenants)
    tables = lua_tables(tenants)
    assert HASH_A in tables and '["indexer"] = 2' in tables
    ports = EdgePorts("0.0.0.0", 8000, 8001, 9901, "127.0.0.1", 18000, 18001)
    files = dynamic_files(tenants, ports)
    assert "key-a" not in "".join(content for _, content in files.values())
    route_config = routes(tenants)
    tenant_routes = route_config["virtual_hosts"][0]["routes"]
    names = [route["name"] for route in tenant_routes]
    assert names == ["tenant-search", "tenant-indexer", "open"]
    # Only a tenant with a texts quota has a texts bucket, of that size.
    search, indexer, _ = (route.get("typed_per_filter_config", {}) for route in tenant_routes)
    assert TEXTS_FILTER not in search
    (texts,) = indexer[TEXTS_FILTER]["descriptors"]
    assert texts["token_bucket"]["max_tokens"] == 40
    assert 'TEXTS_PER_SECOND = {["indexer"] = 40}' in tables
