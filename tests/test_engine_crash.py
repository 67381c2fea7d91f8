"""An engine's crash is a refusal, never the death of what runs it, on every processor: the
tests make the engine die of a real signal (tests/engine_faults) where OpenVINO 2026.4.1 dies
on a Xeon with AMX, and check what the launcher then does. Its load probe finds the setting a
stage would die in before Triton loads it, and serves the next (server/engine_probe.py); a
catalog export that dies says so in the launcher's refusal (server/catalog_exports.py). The
export's own crash path is tested on a decoder in tests/test_export_families.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from engine_fault import died, with_engine_fault
from model_common.openvino_runtime import ov
from model_common.openvino_setting import Setting, ladder, precision_candidates, served_setting
from model_common.processor import this_processor

from export.engine_choice import MIN_COSINE
from harness.requests import token_inputs
from harness.server import running_server
from perf.ceiling import serving_tokenizer, tokenize
from server.catalog import Catalog, CatalogModel
from server.catalog_exports import engine_of
from server.engine_probe import next_setting
from server.engine_report import engine_line
from server.paths import EXPORTS, OPENVINO_MODEL_DIR
from server.served_repository import prepare
from tests.conftest import sentence_transformers_embed
from tests.embedding_requests import SAMPLE_TEXTS

PROBE_DEATH = "the engine died of SIGFPE compiling or running it"
# A catalog name of its own: its export folder is the suite's (build/exports).
DYING_EXPORT = "export-that-dies"


def _catalog(tmp_path: Path, engine: str, entry: str = "") -> Path:
    path = tmp_path / "models.toml"
    path.write_text(f'[[models]]\nname = "all-MiniLM-L6-v2"\nengine = "{engine}"\n{entry}')
    return path


def _capabilities() -> list[str]:
    return list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def _default_setting() -> Setting:
    """What the packaged model's OpenVINO stage serves on this processor unless told."""
    record = json.loads((OPENVINO_MODEL_DIR / "export.json").read_text())["openvino"]
    return served_setting({}, record, _capabilities(), this_processor().cls)


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model cache of its own, so the probe compiles rather than finding an earlier success;
    the stubs inherit it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.mark.usefixtures("fresh_cache")
def test_a_setting_whose_engine_dies_at_load_is_never_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The stage's default setting dies in the probe: the launcher says so in one line and
    serves the next setting, which a real server then loads and serves at the bar."""
    dying = _default_setting()
    with_engine_fault(monkeypatch, f"SIGFPE:{dying.precision}/{dying.threads_per_stream}")
    served = next_setting(dying)
    assert served is not None
    catalog = prepare(_catalog(tmp_path, "openvino"), tmp_path / "served")
    assert isinstance(catalog, Catalog), catalog
    (model,) = catalog.models
    note = f"{dying.label} refused: {PROBE_DEATH} on this processor; serving {served.label}"
    assert model.openvino_setting == (served.precision, served.threads_per_stream)
    assert model.probe_note == note
    assert note in capfd.readouterr().err
    line = engine_line(model)
    assert f"engine openvino, precision {served.label} (the catalog)" in line, line
    assert line.endswith(note), line
    config = (tmp_path / "served" / model.engine_stage / "config.pbtxt").read_text()
    assert f'string_value: "{served.precision}"' in config
    assert f'string_value: "{served.threads_per_stream}"' in config

    reference = sentence_transformers_embed(SAMPLE_TEXTS)
    log = tmp_path / "tritonserver.log"
    with running_server(log, [tmp_path / "served"]) as server:
        (tokens,) = tokenize(serving_tokenizer(), [SAMPLE_TEXTS])
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            inputs = token_inputs(grpcclient, tokens.input_ids, tokens.attention_mask)
            rows = client.infer(model.engine_stage, inputs).as_numpy("EMBEDDING")
    assert np.sum(rows * reference, axis=1).min() >= MIN_COSINE
    threads = f"of {served.threads_per_stream} thread(s)"
    assert f"precision {served.precision}" in log.read_text() and threads in log.read_text()


@pytest.mark.usefixtures("fresh_cache")
def test_a_forced_engine_that_dies_in_every_setting_refuses_the_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = ladder(precision_candidates("BF16" in _capabilities()))
    faults = ",".join(f"{s.precision}/{s.threads_per_stream}" for s in every)
    with_engine_fault(monkeypatch, f"SIGFPE:{faults}")
    path = _catalog(tmp_path, "openvino")
    refusal = prepare(path, tmp_path / "served")
    deaths = "; ".join(f"{s.label} refused: {PROBE_DEATH}" for s in _probed_from_the_default())
    assert refusal == (
        f"catalog {path}: entry 'all-MiniLM-L6-v2': engine 'openvino', but no OpenVINO setting "
        f'loads on this processor ({deaths}); set engine = "auto" or "onnxruntime"'
    )


def _probed_from_the_default() -> list[Setting]:
    """The settings the probe goes through where each dies: the stage's default, then on."""
    settings: list[Setting] = []
    setting: Setting | None = _default_setting()
    while setting is not None:
        settings.append(setting)
        setting = next_setting(setting)
    return settings


@pytest.mark.usefixtures("fresh_cache")
def test_auto_serves_onnx_runtime_where_no_openvino_setting_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine_of(CatalogModel("all-MiniLM-L6-v2", None)) != "openvino":
        pytest.skip(
            "this machine's export measured ONNX Runtime faster, so auto serves it without "
            "probing OpenVINO: the fallback from OpenVINO is not reached here"
        )
    every = ladder(precision_candidates("BF16" in _capabilities()))
    faults = ",".join(f"{s.precision}/{s.threads_per_stream}" for s in every)
    with_engine_fault(monkeypatch, f"SIGFPE:{faults}")
    catalog = prepare(_catalog(tmp_path, "auto"), tmp_path / "served")
    assert isinstance(catalog, Catalog), catalog
    (model,) = catalog.models
    assert engine_of(model) == "onnxruntime"
    assert model.probe_note is not None and model.probe_note.endswith("serving onnxruntime")
    line = engine_line(model)
    assert line.startswith("all-MiniLM-L6-v2: engine onnxruntime, precision f32, graph "), line
    assert "(auto)" in line and line.endswith(model.probe_note), line


def test_an_export_that_dies_is_named_in_the_launchers_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, family_folders: dict[str, Path]
) -> None:
    """ONNX Runtime dies checking a catalog model's export: the refusal names the entry and
    the death, not the tail of a progress bar."""
    folder = tmp_path / "bert"
    shutil.copytree(family_folders["bert"], folder)
    with_engine_fault(monkeypatch, "SIGSEGV:onnxruntime")
    path = tmp_path / "models.toml"
    path.write_text(f'[[models]]\nname = "{DYING_EXPORT}"\npath = "{folder}"\n')
    try:
        refusal = prepare(path, tmp_path / "served")
    finally:
        shutil.rmtree(EXPORTS / DYING_EXPORT, ignore_errors=True)
    assert refusal == (
        f"catalog {path}: entry '{DYING_EXPORT}' ({folder}): export refused: self-check: "
        f"ONNX Runtime: {died('SIGSEGV', 'loading')}; nothing was written"
    )
