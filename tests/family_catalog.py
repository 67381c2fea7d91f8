"""The random-weight model of each family (harness/family_models.py) in a catalog beside the
packaged MiniLM, exported once, as the launcher exports a catalog (export_onnx.py, then
export_openvino.py where the entry's engine may be OpenVINO), for the tests of the exports
(tests/test_export_families.py) and of serving them (tests/test_catalog_families.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.catalog_files import catalog_beside_minilm
from server.catalog import Catalog
from server.catalog_exports import export_root

# Each family's engine in the catalog: one on OpenVINO shows an engine choice per entry, and
# the decoder's is auto, so its OpenVINO export is checked too.
FAMILY_ENGINES = {
    "bert": "onnxruntime",
    "xlmr": "openvino",
    "mpnet": "onnxruntime",
    "modernbert": "onnxruntime",
    "qwen3": "auto",
}


def catalog_name(family: str) -> str:
    return f"{family}-random"


@dataclass(frozen=True)
class FamilyCatalog:
    catalog: Catalog
    served: Path  # the repository written for it

    def repository(self, family: str) -> Path:
        """Where the family's model was exported, laid out as export/ lays out a repository."""
        model = self.catalog.model(catalog_name(family))
        assert model is not None, family
        return export_root(model)


def family_catalog(folders: dict[str, Path], workdir: Path) -> FamilyCatalog:
    named = {catalog_name(family): folders[family] for family in FAMILY_ENGINES}
    engines = {catalog_name(family): engine for family, engine in FAMILY_ENGINES.items()}
    return FamilyCatalog(catalog_beside_minilm(workdir, named, engines), workdir / "served")
