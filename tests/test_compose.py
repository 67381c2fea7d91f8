"""Structure of docker-compose.yml and the Dockerfiles it builds (no Docker
engine here): the YAML parses, every file and path it refers to exists,
images are pinned, and the serving containers run the launcher (its parser
accepts their arguments), stop gracefully, take the admin key from the
environment, expose their ports, check their health and, on the GPU, reserve
one."""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from server.launch import (
    ADMIN_KEY_VARIABLE,
    EXIT_TIMEOUT_S,
    REPO_ROOT,
    SERIALIZER_BACKEND,
    SERIALIZER_FILE,
    argument_parser,
)
from server.watchdog import STOP_TIMEOUT_S

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
SERVING_PORTS = {8000, 8001, 8002}
GPU_SERVICES = ("export", "triton")
SERVING_SERVICES = ("triton", "triton-cpu")
NGC_RELEASE = "24.10"
LAUNCHER = ["python3", "-m", "server.launch"]
# The Python of tritonserver:24.10-py3 (Ubuntu 22.04), which runs the launcher.
IMAGE_PYTHON = (3, 10)
# tritonserver's own stop once drained: unloading idle models, ending stubs.
SERVER_STOP_MARGIN_S = 15.0


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


def _final_stage(dockerfile: Path) -> tuple[str, list[tuple[str, list[str]]]]:
    """The base image of the last stage, and that stage's instructions."""
    instructions = _instructions(dockerfile)
    start = max(i for i, (instruction, _) in enumerate(instructions) if instruction == "FROM")
    return instructions[start][1][0], instructions[start + 1 :]


def _seconds(duration: str) -> float:
    """A compose duration ("60s", "1m30s") in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us)", duration)
    assert parts and "".join(a + b for a, b in parts) == duration, duration
    return sum(float(amount) * units[unit] for amount, unit in parts)


def _launcher_arguments(name: str, service: dict[str, Any]) -> argparse.Namespace:
    """The service's command parsed by the launcher's own argument parser."""
    command = [str(argument) for argument in service["command"]]
    assert command[: len(LAUNCHER)] == LAUNCHER, f"{name}: {command}"
    try:
        return argument_parser().parse_args(command[len(LAUNCHER) :])
    except SystemExit:
        pytest.fail(f"{name}: server.launch rejects {command[len(LAUNCHER) :]}")


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


def test_serving_containers_run_the_launcher_on_the_image_triton(
    compose: dict[str, Any],
) -> None:
    for name in SERVING_SERVICES:
        service = _services(compose)[name]
        launcher = _launcher_arguments(name, service)
        assert launcher.host == "0.0.0.0", f"{name}: binds {launcher.host} in the container"
        assert launcher.triton_home == Path("/opt/tritonserver"), name
        base, stage = _final_stage(_dockerfiles(compose)[name][1])
        assert base.startswith("nvcr.io/nvidia/tritonserver:"), base
        # --triton-home uses <home>/backends as is: the serializer must be there.
        serializer = PurePosixPath(launcher.triton_home, "backends", SERIALIZER_BACKEND)
        copied = {
            PurePosixPath(arguments[-1])
            for instruction, arguments in stage
            if instruction == "COPY" and "--from=serializer" in arguments
        }
        assert serializer / SERIALIZER_FILE in copied, f"{name}: {copied}"
        # `python3 -m server.launch` imports server/ from the working folder.
        workdirs = [arguments[0] for instruction, arguments in stage if instruction == "WORKDIR"]
        assert workdirs, f"{name}: the final stage sets no WORKDIR"
        destinations = [
            PurePosixPath(workdirs[-1], arguments[-1])
            for instruction, arguments in stage
            if instruction == "COPY"
            and [a for a in arguments if not a.startswith("--")][0] == "server"
        ]
        assert destinations == [PurePosixPath(workdirs[-1], "server")], destinations


def test_the_launcher_runs_on_the_image_python() -> None:
    """The launcher and what it imports parse as the image's Python and import
    nothing outside the standard library and server/ at module level."""
    pending, seen = ["launch"], set()
    while pending:
        module = pending.pop()
        seen.add(module)
        source = (REPO_ROOT / "server" / f"{module}.py").read_text()
        tree = ast.parse(source, feature_version=IMAGE_PYTHON)
        for node in tree.body:
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top, _, rest = name.partition(".")
                if top == "server":
                    pending.extend({rest} - seen)
                else:
                    assert top in sys.stdlib_module_names or top == "__future__", (
                        f"server/{module}.py imports {name}, which the image may not have"
                    )
    assert {"launch", "watchdog", "shutdown", "health"} <= seen


def test_serving_containers_stop_gracefully(compose: dict[str, Any]) -> None:
    """docker stop's SIGTERM reaches the launcher through init, and Docker
    waits for the watchdog, the drain and tritonserver's own stop."""
    needed = STOP_TIMEOUT_S + EXIT_TIMEOUT_S + SERVER_STOP_MARGIN_S
    for name in SERVING_SERVICES:
        service = _services(compose)[name]
        assert service.get("init") is True, f"{name}: no init to forward SIGTERM and reap stubs"
        grace = _seconds(str(service["stop_grace_period"]))
        assert grace >= needed, f"{name}: stop_grace_period {grace:g} s < {needed:g} s"


def test_admin_key_reaches_the_launcher_through_the_environment(
    compose: dict[str, Any],
) -> None:
    for name in SERVING_SERVICES:
        service = _services(compose)[name]
        value = service["environment"][ADMIN_KEY_VARIABLE]
        # Required, no default: compose stops with the message when it is unset.
        assert re.fullmatch(rf"\$\{{{ADMIN_KEY_VARIABLE}:\?[^}}]+\}}", value), value
        command = " ".join(str(argument) for argument in service["command"])
        assert "admin-key" not in command and "restricted" not in command, command


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
