"""Models by their Hub id (`scripts/serve.sh --model-id`, a catalog's
`hub =` entries): random-weight models published on a Hub on loopback
(harness/hub.py: olah serving git repositories) and downloaded by
huggingface_hub through HF_ENDPOINT, into a Hugging Face cache of the test's
own, as from huggingface.co. The served model answers as sentence-transformers
on the published folder (the revision's files), serves again from the cache
with the network gone without exporting again, and each way a download can
fail stops the start with one line naming the entry, the id and what to do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from embedding_catalog.catalog import CatalogModel, FolderKind, folder_kind
from embedding_catalog.hub import HubSource
from embedding_catalog.tasks import M3
from embedding_requests import SAMPLE_TEXTS, embed_float32
from served_catalog import post_json

from export.engine_choice import MIN_COSINE
from harness.export_environment import run_in_export_environment
from harness.gateway import running_gateway
from harness.hub import hub_front, publish, running_hub
from harness.ports import free_loopback_port
from harness.server import running_server
from server.catalog_exports import DIGEST_FILE, HUB_RECORD, source_digest
from server.model_id import MODEL_ID_CATALOG
from server.paths import MODEL_REPOSITORY, REPO_ROOT

OWNER = "hub-org"
MODEL = f"{OWNER}/tiny-bert"
M3_MODEL = f"{OWNER}/tiny-bge-m3"
SERVED_NAME = "tiny-bert"  # the id's last part
TOKEN = "hf_test_token"
# How each repository differs from the random-weight BERT (a bi-encoder).
BROKEN = ("no-modules", "unknown-type", "pickles", "remote-code")


@dataclass(frozen=True)
class Hub:
    url: str
    mirrors: Path
    folder: Path  # what MODEL's main holds
    commit: str


def _variant(bert: Path, out: Path, kind: str) -> Path:
    """A copy of the BERT folder, broken as `kind` says."""
    folder = out / kind
    shutil.copytree(bert, folder)
    if kind == "no-modules":
        (folder / "modules.json").unlink()
    elif kind == "unknown-type":
        (folder / "config_sentence_transformers.json").write_text(
            json.dumps({"model_type": "SomethingElse"})
        )
    elif kind == "pickles":
        # Never loaded: the download is refused on the file names alone.
        (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    elif kind == "remote-code":
        config = json.loads((folder / "config.json").read_text())
        config["auto_map"] = {"AutoModel": "modeling_tiny.TinyModel"}
        (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def hub(
    family_folders: dict[str, Path],
    m3_folders: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Hub]:
    work = tmp_path_factory.mktemp("hub")
    mirrors = work / "mirrors"
    bert = family_folders["bert"]
    commit = publish(bert, MODEL, mirrors)
    publish(bert, f"{OWNER}/gated", mirrors)
    (m3,) = m3_folders.values()
    publish(m3, M3_MODEL, mirrors)
    for kind in BROKEN:
        publish(_variant(bert, work / "variants", kind), f"{OWNER}/{kind}", mirrors)
    with running_hub(mirrors) as url:
        yield Hub(url, mirrors, bert, commit)


def _environment(cache: Path, endpoint: str, **more: str) -> dict[str, str]:
    """The Hugging Face settings of one start: its own cache and exports."""
    return {
        "HF_HUB_CACHE": str(cache),
        "HF_ENDPOINT": endpoint,
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "EMBEDDING_EXPORTS": str(cache.parent / "exports"),
        **more,
    }


def _run(arguments: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    variables = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=REPO_ROOT,
        env={**variables, **environment},
        capture_output=True,
        text=True,
        timeout=180,
    )


def _prepare(
    tmp_path: Path, model_id: str, environment: dict[str, str], *more: str
) -> subprocess.CompletedProcess[str]:
    """The launcher's start up to serving (--prepare-only), as a user runs it."""
    return _run(
        [
            "-m",
            "server.launch",
            "--prepare-only",
            "--log-format=text",
            f"--model-id={model_id}",
            f"--served-repository={tmp_path / 'served'}",
            *more,
        ],
        environment,
    )


def _fetch(model_id: str, environment: dict[str, str], trust_pickle: bool = False) -> Path:
    """The launcher's download alone (server/hub_fetch.py), where a test
    checks only what it fetched: the snapshot folder."""
    source = f"HubSource({model_id!r}, trust_pickle={trust_pickle})"
    code = (
        "from embedding_catalog.hub import HubSource\n"
        "from server.hub_fetch import fetch\n"
        f"print(fetch({source}))\n"
    )
    done = _run(["-c", code], environment)
    assert done.returncode == 0, done.stderr[-2000:]
    folder = Path(done.stdout.strip().splitlines()[-1])
    assert folder.is_dir(), done.stdout[-2000:]
    return folder


def _refusal(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("launcher: catalog "), line
    return line


def _closed_port_url() -> str:
    return f"http://127.0.0.1:{free_loopback_port()}"


def test_a_model_by_its_id_serves_as_sentence_transformers_then_again_offline_unexported(
    hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`scripts/serve.sh --model-id` downloads, exports and serves the model
    at the cosine bar, and the gateway serves it from the catalog the
    launcher wrote, finding it in the cache; stopped and started with
    HF_HUB_OFFLINE=1 and no Hub at all, it serves the same rows from the
    cache without exporting again."""
    cache = tmp_path / "cache"
    launcher = [
        str(REPO_ROOT / "scripts" / "serve.sh"),
        f"--model-id={MODEL}",
        f"--served-repository={tmp_path / 'served'}",
        "--log-format=text",
    ]
    online = _environment(cache, hub.url)
    with running_server(tmp_path / "online.log", launcher=launcher, environment=online) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        served = embed_float32(client, SAMPLE_TEXTS, model=SERVED_NAME)
        monkeypatch.setenv("HF_HUB_CACHE", str(cache))
        gateway_args = (
            f"--catalog={tmp_path / MODEL_ID_CATALOG}",
            f"--model-repository={MODEL_REPOSITORY}",
            f"--exports={tmp_path / 'exports'}",
        )
        log = tmp_path / "gateway.log"
        with running_gateway(server.grpc_url, [], log, extra_args=gateway_args) as gateway:
            # OpenAI's API refuses an empty input, which the Triton contract embeds.
            texts = [text for text in SAMPLE_TEXTS if text]
            status, body = post_json(
                gateway, "/v1/embeddings", {"model": SERVED_NAME, "input": texts}
            )
    assert status == 200, body
    through_gateway = np.asarray([row["embedding"] for row in body["data"]], dtype=np.float32)
    rows = [index for index, text in enumerate(SAMPLE_TEXTS) if text]
    np.testing.assert_allclose(through_gateway, served[rows], atol=1e-6)
    log = (tmp_path / "online.log").read_text()
    assert f"hub '{MODEL}' at revision 'main' is commit {hub.commit}" in log, log[-3000:]
    assert f"exporting '{SERVED_NAME}' from hub '{MODEL}' commit {hub.commit}" in log
    exports = tmp_path / "exports" / SERVED_NAME
    assert json.loads((exports / HUB_RECORD).read_text())["commit"] == hub.commit
    stamp = (exports / DIGEST_FILE).stat().st_mtime_ns

    reference = run_in_export_environment(
        [str(REPO_ROOT / "tests" / "st_reference.py")],
        json.dumps({"model_dir": str(hub.folder), "texts": SAMPLE_TEXTS}),
    )
    expected = np.asarray(json.loads(reference.stdout), dtype=np.float32)
    cosines = np.sum(served * expected, axis=1)
    assert cosines.min() >= MIN_COSINE, cosines

    offline = _environment(cache, _closed_port_url(), HF_HUB_OFFLINE="1")
    with running_server(tmp_path / "offline.log", launcher=launcher, environment=offline) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        again = embed_float32(client, SAMPLE_TEXTS, model=SERVED_NAME)
    log = (tmp_path / "offline.log").read_text()
    assert "exporting" not in log, log[-3000:]
    assert (exports / DIGEST_FILE).stat().st_mtime_ns == stamp
    np.testing.assert_array_equal(again, served)


def test_the_export_is_keyed_by_the_commit(tmp_path: Path) -> None:
    """A new commit of the same branch exports again; the same commit, at
    another path or by another revision name, never does."""
    first, second = "a" * 40, "b" * 40

    def digest(commit: str, revision: str) -> str:
        folder = tmp_path / revision / commit
        folder.mkdir(parents=True)
        source = HubSource(MODEL, revision)
        return source_digest(CatalogModel(SERVED_NAME, folder, hub=source))

    assert digest(first, "main") == digest(first, "v1")
    assert digest(first, "other") != digest(second, "main")


@pytest.mark.parametrize(
    ("model_id", "more", "named"),
    [
        (f"{OWNER}/missing", (), ["no such model at", "check the id, or set HF_TOKEN"]),
        (MODEL, ("--revision=no-such-branch",), ["'no-such-branch'", "no such revision"]),
        (
            f"{OWNER}/no-modules",
            (),
            ["not a sentence-transformers model (no modules.json)"],
        ),
        (f"{OWNER}/unknown-type", (), ["'SomethingElse' is no model this server knows"]),
        (f"{OWNER}/pickles", (), ["pickles only (pytorch_model.bin)", "trust_pickle = true"]),
        (f"{OWNER}/remote-code", (), ["needs trust_remote_code", "config.json"]),
    ],
)
def test_what_the_hub_refuses_or_the_server_does_not_serve_stops_the_start_saying_so(
    hub: Hub, tmp_path: Path, model_id: str, more: tuple[str, ...], named: list[str]
) -> None:
    done = _prepare(tmp_path, model_id, _environment(tmp_path / "cache", hub.url), *more)
    line = _refusal(done)
    name = model_id.split("/")[-1]
    for part in [f"entry '{name}'", f"'{model_id}'", *named]:
        assert part in line, line


def test_trusted_pickles_are_downloaded(hub: Hub, tmp_path: Path) -> None:
    """trust_pickle fetches the pickled weights the default refuses."""
    environment = _environment(tmp_path / "cache", hub.url)
    folder = _fetch(f"{OWNER}/pickles", environment, trust_pickle=True)
    assert (folder / "pytorch_model.bin").is_file()


def test_a_bge_m3_models_heads_are_fetched_untrusted_and_make_it_one(
    hub: Hub, tmp_path: Path
) -> None:
    """BGE-M3's heads are .pt files, which no other weights' pickle rule keeps out: the export
    reads them with torch.load(weights_only=True), and they say what the folder holds."""
    folder = _fetch(M3_MODEL, _environment(tmp_path / "cache", hub.url))
    assert all((folder / name).is_file() for name in M3.folder_files)
    assert folder_kind(folder) == FolderKind(M3.model_type, M3.name)


def test_a_gated_model_wants_a_token_with_access(hub: Hub, tmp_path: Path) -> None:
    gated = f"{OWNER}/gated"
    with hub_front(hub.url, gated={gated: TOKEN}) as url:
        refusal = _refusal(_prepare(tmp_path, gated, _environment(tmp_path / "none", url)))
        wrong = _environment(tmp_path / "wrong", url, HF_TOKEN="hf_other")
        other = _refusal(_prepare(tmp_path, gated, wrong))
        opened = _fetch(gated, _environment(tmp_path / "cache", url, HF_TOKEN=TOKEN))
    for part in ["entry 'gated'", f"'{gated}'", "is gated and HF_TOKEN is unset", "HF_TOKEN"]:
        assert part in refusal, refusal
    assert "HF_TOKEN has no access to it" in other, other
    assert (opened / "model.safetensors").is_file()


def test_without_network_or_cache_the_start_says_which_to_provide(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    unreachable = _refusal(_prepare(tmp_path, MODEL, _environment(cache, _closed_port_url())))
    offline = _refusal(
        _prepare(tmp_path, MODEL, _environment(cache, _closed_port_url(), HF_HUB_OFFLINE="1"))
    )
    for line, named in (
        (unreachable, ["cannot reach the Hub at", "check the network or HF_ENDPOINT"]),
        (offline, ["HF_HUB_OFFLINE=1", "does not hold it", "fill the cache"]),
    ):
        for part in [f"entry '{SERVED_NAME}'", f"'{MODEL}'", str(cache), *named]:
            assert part in line, line


def test_a_download_cut_halfway_is_never_served_and_resumes(hub: Hub, tmp_path: Path) -> None:
    """The weights cut halfway stop the start; offline, the half-filled cache
    is refused, not served; online again, the download completes."""
    cache = tmp_path / "cache"
    with hub_front(hub.url, cut={"model.safetensors"}) as url:
        cut = _refusal(_prepare(tmp_path, MODEL, _environment(cache, url)))
    for part in [f"entry '{SERVED_NAME}'", f"'{MODEL}'", "interrupted", "start again"]:
        assert part in cut, cut
    assert not list(cache.glob("models--*/snapshots/*/model.safetensors"))

    offline = _environment(cache, _closed_port_url(), HF_HUB_OFFLINE="1")
    partial = _refusal(_prepare(tmp_path, MODEL, offline))
    assert "holds it only in part" in partial and f"'{MODEL}'" in partial, partial

    folder = _fetch(MODEL, _environment(cache, hub.url))
    weights = folder / "model.safetensors"
    assert weights.read_bytes() == (hub.folder / "model.safetensors").read_bytes()
