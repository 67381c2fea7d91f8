"""Structure of docker-compose.yml and the Dockerfiles it builds (no Docker
engine here): the YAML parses, every file and path it refers to exists,
images are pinned, and the serving containers expose their ports, check their
health and, on the GPU, reserve one."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from server.launch import REPO_ROOT

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
SERVING_PORTS = {8000, 8001, 8002}
GPU_SERVICES = ("export", "triton")
SERVING_SERVICES = ("triton", "triton-cpu")
NGC_RELEASE = "24.10"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(document, dict) and isinstance(document.get("services"), dict)
    return document


def _services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _dockerfiles(compose: dict[str, Any]) -> dict[str, tuple[Path, Path]]:
    """Service name -> (build context, Dockerfile), for services that build."""
    built = {}
    for name, service in _services(compose).items():
        if "build" in service:
            context = (REPO_ROOT / service["build"]["context"]).resolve()
            built[name] = (context, context / service["build"].get("dockerfile", "Dockerfile"))
    return built


def _instructions(dockerfile: Path) -> list[tuple[str, list[str]]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined;
    the arguments of the JSON (exec) form come parsed."""
    joined = re.sub(r"\\\n", " ", dockerfile.read_text())
    parsed = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, rest = line.split(maxsplit=1)
        arguments = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
        parsed.append((instruction.upper(), arguments))
    return parsed


def _dockerignored(context: Path) -> set[str]:
    ignore = context / ".dockerignore"
    if not ignore.exists():
        return set()
    return {
        line.strip()
        for line in ignore.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }


def _is_pinned(image: str) -> bool:
    name, _, tag = image.rpartition(":")
    return bool(name) and "/" not in tag and tag not in ("", "latest")


def _bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, container target) of each volume entry in short syntax."""
    return [tuple(entry.split(":")[:2]) for entry in service.get("volumes", [])]


def test_compose_defines_the_deployment_services(compose: dict[str, Any]) -> None:
    services = _services(compose)
    assert set(services) == {"onnx-export", "export", "triton", "triton-cpu", "perf"}
    # `docker compose up` runs the GPU path; the others need their profile.
    assert "profiles" not in services["triton"] and "profiles" not in services["export"]
    assert services["triton-cpu"]["profiles"] == ["cpu"]
    assert services["perf"]["profiles"] == ["perf"]


def test_every_image_is_pinned_to_a_tag(compose: dict[str, Any]) -> None:
    images = [service["image"] for service in _services(compose).values() if "image" in service]
    stages: set[str] = set()
    for _, dockerfile in _dockerfiles(compose).values():
        for instruction, arguments in _instructions(dockerfile):
            if instruction == "FROM":
                if arguments[0] not in stages:
                    images.append(arguments[0])
                if len(arguments) == 3 and arguments[1].upper() == "AS":
                    stages.add(arguments[2])
    unpinned = [image for image in images if not _is_pinned(image)]
    assert not unpinned, f"images without a fixed tag: {unpinned}"


def test_ngc_images_come_from_one_release(compose: dict[str, Any]) -> None:
    # An engine loads only into the TensorRT it was built with: the TensorRT
    # image that builds it and the Triton image that serves it must match.
    ngc = [
        arguments[0]
        for _, dockerfile in _dockerfiles(compose).values()
        for instruction, arguments in _instructions(dockerfile)
        if instruction == "FROM" and arguments[0].startswith("nvcr.io/nvidia/t")
    ] + [
        service["image"]
        for service in _services(compose).values()
        if service.get("image", "").startswith("nvcr.io/")
    ]
    assert {"tensorrt", "tritonserver"} <= {image.split("/")[2].split(":")[0] for image in ngc}
    releases = {image.split(":")[1].split("-")[0] for image in ngc}
    assert releases == {NGC_RELEASE}, ngc


def test_build_contexts_dockerfiles_and_copy_sources_exist(compose: dict[str, Any]) -> None:
    built = _dockerfiles(compose)
    assert set(built) >= {"onnx-export", "export", "triton", "triton-cpu"}
    for name, (context, dockerfile) in built.items():
        assert context.is_dir(), f"{name}: build context {context} is missing"
        assert dockerfile.is_file(), f"{name}: {dockerfile} is missing"
        ignored = _dockerignored(context)
        for instruction, arguments in _instructions(dockerfile):
            if instruction not in ("COPY", "ADD"):
                continue
            if any(argument.startswith("--from=") for argument in arguments):
                continue
            sources = [argument for argument in arguments if not argument.startswith("--")][:-1]
            assert sources, f"{dockerfile}: {instruction} without a source"
            for source in sources:
                assert (context / source).exists(), f"{dockerfile}: {source} is missing"
                assert PurePosixPath(source).parts[0] not in ignored, (
                    f"{dockerfile}: {source} is excluded by .dockerignore"
                )


def test_copied_python_scripts_bring_their_sibling_modules(compose: dict[str, Any]) -> None:
    """A script run from its own folder imports the modules beside it: those must be copied too."""
    for context, dockerfile in _dockerfiles(compose).values():
        copied = {
            PurePosixPath(source)
            for instruction, arguments in _instructions(dockerfile)
            if instruction == "COPY" and not any(a.startswith("--from=") for a in arguments)
            for source in [a for a in arguments if not a.startswith("--")][:-1]
        }
        for script in (path for path in copied if path.suffix == ".py"):
            tree = ast.parse((context / script).read_text())
            imported = {
                alias.name.split(".")[0]
                for node in ast.walk(tree)
                if isinstance(node, ast.Import)
                for alias in node.names
            } | {
                node.module.split(".")[0]
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
            }
            for name in imported:
                sibling = script.parent / f"{name}.py"
                if (context / sibling).is_file():
                    assert sibling in copied or script.parent in copied, (
                        f"{dockerfile}: {script} imports {name}, but {sibling} is not copied"
                    )


def test_entry_scripts_are_executable(compose: dict[str, Any]) -> None:
    for context, dockerfile in _dockerfiles(compose).values():
        for instruction, arguments in _instructions(dockerfile):
            if instruction == "CMD" and "/" in arguments[0]:
                script = context / arguments[0]
                assert os.access(script, os.X_OK), f"{dockerfile}: {script} is not executable"


def test_bind_sources_and_named_volumes_exist(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in _services(compose).items():
        binds = _bind_mounts(service)
        for source, target in binds:
            if source.startswith((".", "/")):
                assert (REPO_ROOT / source).exists(), f"{name}: bind source {source} is missing"
                continue
            assert source in declared, f"{name}: volume {source} is not declared"
            # A named volume mounted inside a bind mount needs its mount
            # point to exist in the bound folder (which may be read-only).
            for outer_source, outer_target in binds:
                if outer_source.startswith(".") and target.startswith(outer_target + "/"):
                    inside = REPO_ROOT / outer_source / target[len(outer_target) + 1 :]
                    assert inside.is_dir(), f"{name}: mount point {inside} is missing"


def test_served_repositories_exist_on_the_host(compose: dict[str, Any]) -> None:
    for name in SERVING_SERVICES:
        service = _services(compose)[name]
        mounts = {target: source for source, target in _bind_mounts(service)}
        repositories = [
            argument.split("=", 1)[1]
            for argument in service["command"]
            if argument.startswith("--model-repository=")
        ]
        assert len(repositories) == 2, f"{name}: expected shared + one embedder repository"
        for repository in repositories:
            mount = next(target for target in mounts if repository.startswith(target + "/"))
            host = REPO_ROOT / mounts[mount] / repository[len(mount) + 1 :]
            assert (host / "embedder").is_dir() or (host / "embed").is_dir(), host


def test_gpu_config_name_selects_an_existing_config(compose: dict[str, Any]) -> None:
    command = _services(compose)["triton"]["command"]
    names = [
        argument.split("=", 1)[1] for argument in command if "--model-config-name=" in argument
    ]
    assert names == ["gpu"]
    configs = list((REPO_ROOT / "model_repository").glob("*/*/configs/gpu.pbtxt"))
    assert configs, "no model has a configs/gpu.pbtxt for --model-config-name=gpu"


def test_serving_containers_publish_ports_and_check_readiness(compose: dict[str, Any]) -> None:
    for name in SERVING_SERVICES:
        service = _services(compose)[name]
        published = {int(str(port).split(":")[-1]) for port in service["ports"]}
        assert published == SERVING_PORTS, f"{name}: ports {published}"
        health = " ".join(service["healthcheck"]["test"])
        assert "/v2/health/ready" in health and ":8000" in health, f"{name}: {health}"
        # Docker's 64 MB /dev/shm is too small for the Python backend.
        shm = str(service["shm_size"])
        assert re.fullmatch(r"\d+gb", shm) and int(shm[:-2]) >= 1, f"{name}: shm_size {shm}"


def test_gpu_services_reserve_a_gpu_and_the_cpu_server_does_not(
    compose: dict[str, Any],
) -> None:
    services = _services(compose)
    for name in GPU_SERVICES:
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert any(
            device["driver"] == "nvidia" and "gpu" in device["capabilities"] for device in devices
        ), f"{name}: no NVIDIA GPU reservation"
    assert "deploy" not in services["triton-cpu"]


def test_perf_service_sweeps_the_gpu_server(compose: dict[str, Any]) -> None:
    perf = _services(compose)["perf"]
    assert perf["image"].endswith("-py3-sdk")
    script = perf["command"][-1]
    assert "python3 -m perf.sweep --url triton:8001" in script
    assert (REPO_ROOT / "perf" / "sweep.py").is_file()
    assert perf["depends_on"]["triton"]["condition"] == "service_healthy"
