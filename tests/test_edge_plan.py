"""The edge's plan (server/edge/plan.py) from `python -m server.edge`'s
arguments, without starting anything: Envoy's ports, files, command line
and bootstrap."""

from __future__ import annotations

from pathlib import Path

from server.edge.__main__ import argument_parser
from server.edge.config import GRPC_LISTENER, HTTP_LISTENER
from server.edge.plan import EdgePlan, edge_plan

ENVOY = Path("/opt/envoy/bin/envoy")


def plan(tmp_path: Path, *arguments: str) -> EdgePlan:
    args = argument_parser().parse_args(
        [
            f"--tenants={tmp_path / 'tenants.toml'}",
            "--host=0.0.0.0",
            "--http-port=9000",
            "--grpc-port=9001",
            "--admin-port=9901",
            "--triton-http-port=41001",
            "--triton-grpc-port=41002",
            f"--state-dir={tmp_path / 'state'}",
            *arguments,
        ]
    )
    return edge_plan(args, ENVOY, {"embed": ("tokenizer",)})


def listeners(bootstrap: dict[str, object]) -> dict[str, tuple[str, int]]:
    static = bootstrap["static_resources"]
    assert isinstance(static, dict)
    return {
        listener["name"]: (
            listener["address"]["socket_address"]["address"],
            listener["address"]["socket_address"]["port_value"],
        )
        for listener in static["listeners"]
    }


def test_envoys_ports_files_and_command(tmp_path: Path) -> None:
    edge = plan(tmp_path, "--concurrency=2")
    envoy = edge.envoy
    assert edge.tenants == tmp_path / "tenants.toml" and edge.stages == {"embed": ("tokenizer",)}
    assert (envoy.ports.triton_http, envoy.ports.triton_grpc) == (41001, 41002)
    assert envoy.config_dir == tmp_path / "state" / "xds"
    assert envoy.log_path.parent == envoy.bootstrap_path.parent == tmp_path / "state"
    command = envoy.command()
    assert command[0] == str(ENVOY)
    assert command[command.index("--config-path") + 1] == str(envoy.bootstrap_path)
    assert command[command.index("--concurrency") + 1] == "2"
    # Its admin interface can stop it: loopback only, whatever --host says.
    assert envoy.admin_url == "http://127.0.0.1:9901"
    bootstrap = envoy.bootstrap()
    assert bootstrap["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    assert listeners(bootstrap) == {
        HTTP_LISTENER: ("0.0.0.0", 9000),
        GRPC_LISTENER: ("0.0.0.0", 9001),
    }
    assert envoy.tracing is None


def test_the_stats_listener_and_the_tracer_where_asked(tmp_path: Path) -> None:
    edge = plan(tmp_path, "--stats-port=9003", "--otlp-endpoint=http://collector:4318")
    envoy = edge.envoy
    assert listeners(envoy.bootstrap())["stats"] == ("0.0.0.0", 9003)
    assert envoy.tracing is not None and envoy.tracing.endpoint == "http://collector:4318"
