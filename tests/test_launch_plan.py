"""The launcher's plan (server/launch_plan.py) from its arguments, without
starting anything: where tritonserver and the edge listen, their command
lines and environments, where the admin key goes and where it must not."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from server.launch import argument_parser
from server.launch_plan import (
    ADMIN_KEY_HEADER,
    ADMIN_KEY_VARIABLE,
    BACKLOG_DIR_VARIABLE,
    EDGE_STATS_PORT_OFFSET,
    METRICS_URL_VARIABLE,
    InternalPorts,
    LaunchPlan,
    launch_plan,
)
from server.triton_install import Triton

TRITON = Triton(Path("/opt/triton/bin/tritonserver"), Path("/opt/triton/backends"), Path("/libs"))
REPOSITORY = Path("/served")
PORTS = InternalPorts(http=41001, grpc=41002, edge_admin=41003)
PUBLIC = ["--host=0.0.0.0", "--http-port=9000", "--grpc-port=9001", "--metrics-port=9002"]
ENVIRON = {"PATH": "/usr/bin", "HOME": "/home/serve"}


def plan(*arguments: str, environ: dict[str, str] = ENVIRON) -> LaunchPlan:
    args = argument_parser().parse_args([*PUBLIC, *arguments])
    tenants = args.tenants is not None
    return launch_plan(
        args, TRITON, [REPOSITORY], environ, PORTS if tenants else None, Path("/dev/shm")
    )


def option(command: tuple[str, ...], name: str) -> str:
    (value,) = [part.split("=", 1)[1] for part in command if part.startswith(f"{name}=")]
    return value


def test_without_tenants_tritonserver_takes_the_public_ports() -> None:
    served = plan()
    assert served.edge is None
    command = served.server.command
    assert command[0] == str(TRITON.executable)
    assert option(command, "--http-address") == option(command, "--grpc-address") == "0.0.0.0"
    assert (option(command, "--http-port"), option(command, "--grpc-port")) == ("9000", "9001")
    assert option(command, "--metrics-port") == "9002"
    assert option(command, "--model-repository") == str(REPOSITORY)
    assert option(command, "--backend-directory") == str(TRITON.backend_directory)


def test_with_tenants_the_edge_takes_them_and_tritonserver_hides_behind(tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.toml"
    served = plan(f"--tenants={tenants}", f"--served-repository={tmp_path / 'served'}")
    server = served.server.command
    assert option(server, "--http-address") == option(server, "--grpc-address") == "127.0.0.1"
    assert (option(server, "--http-port"), option(server, "--grpc-port")) == ("41001", "41002")
    # Metrics stay where Prometheus scrapes them.
    assert (option(server, "--metrics-address"), option(server, "--metrics-port")) == (
        "0.0.0.0",
        "9002",
    )
    assert served.edge is not None
    edge = served.edge.command
    assert edge[:3] == (sys.executable, "-m", "server.edge")
    assert option(edge, "--tenants") == str(tenants)
    assert (option(edge, "--host"), option(edge, "--http-port")) == ("0.0.0.0", "9000")
    assert option(edge, "--grpc-port") == "9001"
    assert option(edge, "--admin-port") == "41003"
    assert option(edge, "--stats-port") == str(9002 + EDGE_STATS_PORT_OFFSET)
    assert (option(edge, "--triton-http-port"), option(edge, "--triton-grpc-port")) == (
        "41001",
        "41002",
    )
    assert option(edge, "--state-dir") == str(tmp_path / "edge")
    assert option(edge, "--catalog").endswith("models.toml")
    assert served.endpoints.http_address == "127.0.0.1:41001"


def test_a_plan_with_tenants_needs_the_internal_ports(tmp_path: Path) -> None:
    args = argument_parser().parse_args([f"--tenants={tmp_path / 't.toml'}"])
    with pytest.raises(ValueError, match="internal ports"):
        launch_plan(args, TRITON, [REPOSITORY], ENVIRON)


def test_the_admin_key_is_on_tritonservers_command_line_only() -> None:
    served = plan(environ={**ENVIRON, ADMIN_KEY_VARIABLE: "sesame"})
    assert (
        f"--http-restricted-api=model-repository,shared-memory,logging,trace:{ADMIN_KEY_HEADER}=sesame"
        in (served.server.command)
    )
    assert served.server.environment is not None
    assert ADMIN_KEY_VARIABLE not in served.server.environment
    assert served.admin_headers == {ADMIN_KEY_HEADER: "sesame"}
    open_server = plan()
    assert open_server.admin_headers == {}
    assert not any("restricted" in part for part in open_server.server.command)


def test_tritonservers_environment() -> None:
    environment = plan().server.environment
    assert environment is not None
    assert environment["HOME"] == "/home/serve"
    assert environment["PATH"] == f"{Path(sys.prefix) / 'bin'}:/usr/bin"
    assert environment["LD_LIBRARY_PATH"] == "/libs"
    assert environment[METRICS_URL_VARIABLE] == "http://0.0.0.0:9002/metrics"


def test_the_backlog_folder_goes_in_shared_memory_under_its_variable() -> None:
    scratch = plan().scratch
    assert (scratch.parent, scratch.variable) == (Path("/dev/shm"), BACKLOG_DIR_VARIABLE)


def test_tracing_through_the_edge_leaves_the_sampling_to_it(tmp_path: Path) -> None:
    traced = ["--otlp-endpoint=http://collector:4318", "--trace-sampling=0.5"]
    alone = plan(*traced)
    assert alone.tracing is not None and alone.tracing.ratio == 0.5
    behind = plan(*traced, f"--tenants={tmp_path / 't.toml'}")
    assert behind.tracing is not None and behind.tracing.ratio == 0.0
    assert behind.edge is not None
    assert option(behind.edge.command, "--trace-sampling") == "0.5"
    assert "--trace-config=rate=0" in behind.server.command


def test_json_logs_ask_tritonserver_for_iso8601() -> None:
    assert "--log-format=ISO8601" in plan().server.command
    assert not any(
        part.startswith("--log-format") for part in plan("--log-format=text").server.command
    )
