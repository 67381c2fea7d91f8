"""Run docker-compose.yml's cpu profile for real, under Podman and
podman-compose (machines this project is tested on have no Docker engine):
install the tools where missing, build the CPU image, bring the profile up on
free loopback ports with the tenants edge in front (docker/tenants.compose.yml
and a tenants file), wait until it is ready, and take it down again.

What this machine needs, set for these runs only through a containers.conf
that the environment variable CONTAINERS_CONF names (the system's is left
alone), is in CONTAINERS_CONF below. podman-compose 1.6 on Podman 4.3 skips
`condition: service_healthy` and, without systemd, runs no health-check
timers, so readiness is polled here."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import yaml

from harness.ports import StartError, answers_ok, free_loopback_ports, wait_until_ready
from harness.server import EndpointUrls
from server.health import server_ready
from server.launch import ADMIN_KEY_VARIABLE, Endpoints
from server.paths import REPO_ROOT

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
# Added to COMPOSE_FILE: each server behind the tenants edge.
TENANTS_COMPOSE_FILE = REPO_ROOT / "docker" / "tenants.compose.yml"
# The folder of tenants.toml the override mounts; the file's name in it.
TENANTS_DIR_VARIABLE = "EMBEDDING_TENANTS_DIR"
TENANTS_FILE = "tenants.toml"
PROFILE = "cpu"
SERVER = "triton-cpu"
GATEWAY = "gateway-cpu"
# The shell's settings of a model by Hub id (docker-compose.yml's hub-export
# service): the test serves the packaged model, as without them.
HUB_MODEL_VARIABLES = ("MODEL_ID", "MODEL_REVISION")
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install_podman.sh"
PODMAN_COMPOSE = REPO_ROOT / "build" / "podman-compose" / "bin" / "podman-compose"
# The build secret docker/cpu.Dockerfile mounts for pip: the host's CA bundle,
# without which pip inside a build cannot verify the package index here.
CA_SECRET = "ca-certificates"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# - crun fails on this host's hybrid cgroup v1/v2 layout ("cgroups in hybrid
#   mode not supported"); runc runs.
# - The sandbox cannot raise rlimits, and Podman's defaults (nofile and nproc
#   1048576) fail with "setrlimit ... Operation not permitted". A compose
#   service with its own `ulimits:` replaces these, so the cpu profile has none.
# - Compose's service names resolve through aardvark-dns, netavark's; the
#   podman package also ships a CNI config, whose plugins are not installed.
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"

[network]
network_backend = "netavark"
"""

INSTALL_TIMEOUT_S = 600
BASE_TIMEOUT_S = 600
BUILD_TIMEOUT_S = 1800
READY_TIMEOUT_S = 300
# stop_grace_period (60 s) and podman-compose's own work.
DOWN_TIMEOUT_S = 120
COMMAND_TIMEOUT_S = 120
LOG_TAIL_CHARS = 4000


class ComposeError(StartError):
    pass


def compose_file() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def tenants_compose_file() -> dict[str, Any]:
    return yaml.safe_load(TENANTS_COMPOSE_FILE.read_text())


def unavailable_reason() -> str | None:
    """Why Podman cannot run the profile here, or None. The test installs
    what is missing with apt-get and runs rootful Podman, so it needs root."""
    if os.geteuid() != 0:
        return (
            "needs root: installs podman with apt-get, builds the base image with "
            "debootstrap and runs rootful podman"
        )
    if not (Path("/usr/bin/podman").exists() or Path("/usr/bin/apt-get").exists()):
        return "podman is not installed and there is no apt-get to install it"
    return None


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-LOG_TAIL_CHARS:]


def _run(command: list[str], env: dict[str, str], log_path: Path, timeout_s: float) -> None:
    """Runs `command` with its output appended to `log_path`; raises
    ComposeError with the log's tail if it fails."""
    with log_path.open("a") as log:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        completed = subprocess.run(
            command,
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
        )
    if completed.returncode != 0:
        raise ComposeError(
            f"{command[:3]} exited with {completed.returncode}; log {log_path}:\n{_tail(log_path)}"
        )


def _output(command: list[str], env: dict[str, str]) -> str:
    return subprocess.run(
        command, env=env, capture_output=True, text=True, check=True, timeout=COMMAND_TIMEOUT_S
    ).stdout


def podman_environment(workdir: Path) -> dict[str, str]:
    conf = workdir / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    # COMPOSE_PROFILES would add profiles to --profile, and the compose file's
    # EMBEDDING_* and Hub model settings are the test's to choose.
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("COMPOSE_PROFILES", *HUB_MODEL_VARIABLES)
        and not key.startswith("EMBEDDING_")
    }
    environment["CONTAINERS_CONF"] = str(conf)
    return environment


def install_tools(env: dict[str, str], log_path: Path) -> None:
    _run([str(INSTALL_SCRIPT)], env, log_path, INSTALL_TIMEOUT_S)


def base_image(dockerfile: Path) -> tuple[str, str]:
    """The one image the Dockerfile's stages start from that no stage of its
    own builds, as Podman names it once pulled, and its Debian release."""
    stages: set[str] = set()
    bases: set[str] = set()
    for image, stage in re.findall(
        r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", dockerfile.read_text(), re.M
    ):
        if image not in stages:
            bases.add(image)
        stages.add(stage)
    (base,) = bases
    release = re.fullmatch(r"debian:(\w+)-slim", base)
    assert release, f"{dockerfile}: the offline stand-in is a Debian release; the base is {base}"
    return f"docker.io/library/{base}", release[1]


def _debian_mirror(release: str) -> str:
    """The host's apt mirror for `release` (deb822 .sources or one-line
    entries), else Debian's own."""
    sources = Path("/etc/apt")
    for path in [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]:
        if not path.is_file():
            continue
        text = path.read_text()
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([\w-]+):[ \t]*(.*)$", stanza, re.M))
                if release in fields.get("Suites", "").split() and fields.get("URIs"):
                    return fields["URIs"].split()[0]
        else:
            for uri, suite in re.findall(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", text, re.M):
                if suite == release:
                    return uri
    return "http://deb.debian.org/debian"


# What Docker's debian:*-slim images add to a minbase debootstrap
# (debuerreotype's minimizing config and slimify): apt keeps no downloaded
# packages, caches or translations; dpkg skips fsync, and installs no
# documentation, manual pages or translations; services never start.
SLIM_FILES = {
    "etc/apt/apt.conf.d/docker-clean": (
        'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb'
        ' /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };\n'
        'APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb'
        ' /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };\n'
        'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n'
    ),
    "etc/apt/apt.conf.d/docker-gzip-indexes": 'Acquire::GzipIndexes "true";\n',
    "etc/apt/apt.conf.d/docker-no-languages": 'Acquire::Languages "none";\n',
    "etc/apt/apt.conf.d/docker-autoremove-suggests": 'Apt::AutoRemove::SuggestsImportant "false";\n',
    "etc/dpkg/dpkg.cfg.d/docker-apt-speedup": "force-unsafe-io\n",
    "usr/sbin/policy-rc.d": "#!/bin/sh\nexit 101\n",
}
SLIM_EXCLUDES = (
    "/usr/share/doc/*",
    "/usr/share/groff/*",
    "/usr/share/info/*",
    "/usr/share/linda/*",
    "/usr/share/lintian/overrides/*",
    "/usr/share/locale/*",
    "/usr/share/man/*",
)
SLIM_INCLUDES = ("/usr/share/doc/*/copyright", "/usr/share/locale/locale.alias")


def _slim(rootfs: Path) -> None:
    for relative, text in SLIM_FILES.items():
        (rootfs / relative).write_text(text)
    (rootfs / "usr/sbin/policy-rc.d").chmod(0o755)
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker").write_text(
        "".join(f"path-exclude {pattern}\n" for pattern in SLIM_EXCLUDES)
        + "".join(f"path-include {pattern}\n" for pattern in SLIM_INCLUDES)
    )
    for pattern in SLIM_EXCLUDES:
        folder = rootfs / pattern.strip("/").removesuffix("/*")
        # Deepest first, so that emptied folders go too.
        for path in sorted(folder.rglob("*"), reverse=True):
            kept = any(fnmatch(f"/{path.relative_to(rootfs)}", keep) for keep in SLIM_INCLUDES)
            if path.is_symlink() or path.is_file():
                if not kept:
                    path.unlink()
            elif not any(path.iterdir()):
                path.rmdir()
    # An image starts with no package lists or downloaded packages.
    for cache in ("var/lib/apt/lists", "var/cache/apt"):
        for path in (rootfs / cache).glob("**/*"):
            if path.is_file():
                path.unlink()


def prepare_base_image(
    dockerfile: Path, env: dict[str, str], workdir: Path, log_path: Path
) -> bool:
    """Makes the base image the Dockerfile names, offline, unless Podman has
    it: no registry is reachable here, so debootstrap builds that Debian
    release from the host's mirror (minbase, made slim as Docker's image is),
    imported under the name a pull would give. It replaces the registry
    pull, nothing else: the Dockerfile builds on it unchanged. Returns
    whether it was made."""
    name, release = base_image(dockerfile)
    if subprocess.run(["podman", "image", "exists", name], env=env, check=False).returncode == 0:
        return False
    rootfs, archive = workdir / "rootfs", workdir / "rootfs.tar"
    command = ["debootstrap", "--variant=minbase", release, str(rootfs), _debian_mirror(release)]
    _run(command, env, log_path, BASE_TIMEOUT_S)
    _slim(rootfs)
    _run(["tar", "-C", str(rootfs), "-cf", str(archive), "."], env, log_path, COMMAND_TIMEOUT_S)
    _run(["podman", "import", str(archive), name], env, log_path, COMMAND_TIMEOUT_S)
    _run(["rm", "-rf", str(rootfs), str(archive)], env, log_path, COMMAND_TIMEOUT_S)
    return True


def build_image(service: dict[str, Any], env: dict[str, str], log_path: Path) -> None:
    """Builds the service's image as compose would, from its build section."""
    context = REPO_ROOT / service["build"]["context"]
    command = [
        "podman",
        "build",
        # Podman's default, the OCI format, has no HEALTHCHECK and drops it.
        "--format=docker",
        # The serializer and the virtual environment build side by side.
        "--jobs=2",
        f"--file={context / service['build']['dockerfile']}",
        f"--tag={service['image']}",
    ]
    if CA_BUNDLE.is_file():
        command.append(f"--secret=id={CA_SECRET},src={CA_BUNDLE}")
    _run([*command, str(context)], env, log_path, BUILD_TIMEOUT_S)


@dataclass
class ComposeStack(EndpointUrls):
    """The cpu profile with the tenants edge, up: its server and gateway on
    loopback ports."""

    project: str
    env: dict[str, str]
    workdir: Path
    endpoints: Endpoints  # the server's published HTTP, gRPC and metrics ports
    edge_stats_port: int
    gateway_port: int
    admin_key: str
    containers: dict[str, str] = field(default_factory=dict)  # service -> container
    followers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    @property
    def tenants_path(self) -> Path:
        """The tenants file the server's edge reads, through its folder's mount."""
        return Path(self.env[TENANTS_DIR_VARIABLE]) / TENANTS_FILE

    def write_tenants(self, text: str) -> None:
        """Replaces the tenants file as an editor saves one: a new file
        renamed over the old, readable by the image's non-root user."""
        temporary = self.tenants_path.with_name(f".{TENANTS_FILE}.tmp")
        temporary.write_text(text)
        temporary.chmod(0o644)
        temporary.replace(self.tenants_path)

    @property
    def pod(self) -> str:
        """The pod podman-compose puts the project's containers in."""
        return f"pod_{self.project}"

    @property
    def compose_log(self) -> Path:
        return self.workdir / "podman-compose.log"

    def log_path(self, service: str) -> Path:
        """The container's output, each line after its time stamp (RFC 3339)."""
        return self.workdir / f"{service}.log"

    def compose(self, *arguments: str, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        command = [
            str(PODMAN_COMPOSE),
            f"--file={COMPOSE_FILE}",
            f"--file={TENANTS_COMPOSE_FILE}",
            f"--project-name={self.project}",
            f"--profile={PROFILE}",
            *arguments,
        ]
        _run(command, self.env, self.compose_log, timeout_s)

    def podman(self, *arguments: str) -> str:
        return _output(["podman", *arguments], self.env)

    def labelled(self, kind: str) -> list[str]:
        """Names of this project's containers, networks or volumes."""
        label = f"label=io.podman.compose.project={self.project}"
        if kind == "container":
            return self.podman("ps", "--all", "--filter", label, "--format", "{{.Names}}").split()
        return self.podman(kind, "ls", "--filter", label, "--format", "{{.Name}}").split()

    def up(self) -> None:
        # The server and the gateway without the one-shot hub-export they
        # depend on: without MODEL_ID it does nothing, and its image (torch,
        # from python:3.11-slim) is neither built here nor at hand offline.
        self.compose("up", "--detach", "--no-deps", SERVER, GATEWAY)
        for service in (SERVER, GATEWAY):
            (name,) = self.podman(
                "ps",
                "--all",
                "--filter",
                f"label=io.podman.compose.project={self.project}",
                "--filter",
                f"label=io.podman.compose.service={service}",
                "--format",
                "{{.Names}}",
            ).split()
            self.containers[service] = name
            # Ends when the container stops: the readiness wait fails fast on it.
            with self.log_path(service).open("wb") as log:
                self.followers[service] = subprocess.Popen(
                    ["podman", "logs", "--follow", "--timestamps", name],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )

    def wait_until_ready(self) -> None:
        services: tuple[tuple[str, Callable[[], bool], float], ...] = (
            (SERVER, lambda: server_ready(self.http_url), 1.0),
            (GATEWAY, self.gateway_ready, 0.5),
        )
        for service, ready, interval_s in services:
            wait_until_ready(
                ready,
                self.followers[service],
                self.log_path(service),
                what=f"the {service} container",
                timeout_s=READY_TIMEOUT_S,
                interval_s=interval_s,
                error=ComposeError,
            )

    def gateway_ready(self) -> bool:
        return answers_ok(f"{self.gateway_url}/health/ready")

    def down(self) -> None:
        """`podman-compose down`: stops the containers (SIGTERM, then
        stop_grace_period), removes them, their pod and their network."""
        self.compose("down", timeout_s=DOWN_TIMEOUT_S)
        for follower in self.followers.values():
            follower.wait(timeout=COMMAND_TIMEOUT_S)

    def remove_leftovers(self) -> None:
        """Whatever `down` left, as after a failed test: containers, pod,
        network, volumes of this project."""
        leftovers = [
            (["rm", "--force"], self.labelled("container")),
            (["pod", "rm", "--force", "--ignore"], [self.pod]),
            (["network", "rm", "--force"], self.labelled("network")),
            (["volume", "rm", "--force"], self.labelled("volume")),
        ]
        for command, names in leftovers:
            if names:
                subprocess.run(["podman", *command, *names], env=self.env, capture_output=True)
        for follower in self.followers.values():
            if follower.poll() is None:
                follower.kill()
                follower.wait()


@contextmanager
def running_stack(env: dict[str, str], workdir: Path, tenants: str) -> Iterator[ComposeStack]:
    """`podman-compose --profile cpu up -d` with the tenants override and the
    tenants file `tenants`, the image already built, on free loopback ports
    and a project name of its own; yields once the server and the gateway
    are ready; on exit, removes all the project made (its images stay: the
    next build starts from them)."""
    http_port, grpc_port, metrics_port, stats_port, gateway_port = free_loopback_ports(5)
    admin_key = secrets.token_hex(16)
    # Its own folder, readable by the image's non-root user: the mount shows
    # the folder's own permissions.
    tenants_dir = workdir / "tenants"
    tenants_dir.mkdir(mode=0o755)
    tenants_dir.chmod(0o755)
    stack = ComposeStack(
        project=f"triton-embedding-test-{os.getpid()}",
        # The bind address stays the compose file's default, loopback.
        env={
            **env,
            ADMIN_KEY_VARIABLE: admin_key,
            TENANTS_DIR_VARIABLE: str(tenants_dir),
            "EMBEDDING_HTTP_PORT": str(http_port),
            "EMBEDDING_GRPC_PORT": str(grpc_port),
            "EMBEDDING_METRICS_PORT": str(metrics_port),
            "EMBEDDING_EDGE_STATS_PORT": str(stats_port),
            "EMBEDDING_GATEWAY_PORT": str(gateway_port),
        },
        workdir=workdir,
        endpoints=Endpoints("127.0.0.1", http_port, grpc_port, metrics_port),
        edge_stats_port=stats_port,
        gateway_port=gateway_port,
        admin_key=admin_key,
    )
    stack.write_tenants(tenants)
    try:
        stack.up()
        stack.wait_until_ready()
        yield stack
    finally:
        if stack.labelled("container"):
            try:
                stack.down()
            except ComposeError:
                pass  # what it left, remove_leftovers removes
        stack.remove_leftovers()
