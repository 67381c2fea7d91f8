"""docker-compose.yml's cpu profile for real, under Podman, with the tenants
edge in front (docker/tenants.compose.yml): the CPU image
(docker/cpu.Dockerfile) built from this checkout, `podman-compose --profile
cpu up -d` of its server and gateway with a tenants file (without their
one-shot hub-export, which does nothing without MODEL_ID and whose torch
image is not built here), then, through the containers' published
loopback ports, the held-out parity check against sentence-transformers (gRPC
and HTTP) with a tenant's key, refusals without one, one request through the
gateway service with the key it forwards, a bad request, the per-tenant stats
Prometheus scrapes, a key revoked by editing the file, and `podman-compose
down` with requests in flight, which the edge and the launcher's drain inside
the container must answer. One bring-up serves all of it: the compose file
without the override differs only by the --tenants argument, the mount and
the stats port (tests/test_compose.py).

Podman, runc, debootstrap and podman-compose are installed where missing
(scripts/install_podman.sh); the test is skipped, with the reason, only where
that cannot be done (not root, or no apt-get). No registry is reachable on
the machines this runs on, so where Podman lacks the Debian base image the
Dockerfile names, debootstrap builds that release offline and it is tagged
with the name a pull would give (harness.compose.prepare_base_image): it
replaces the registry pull, nothing else. The model repository is the
host's, exported by scripts/setup.sh and mounted read-only, as compose does.
Containers, pod, network and volumes are removed at the end; the images stay
as the next build's cache, as build/ keeps the host's builds."""

from __future__ import annotations

import json
import re
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from embedding_requests import LONG_TEXT, SAMPLE_TEXTS, Client
from tritonclient.utils import InferenceServerException

from export.engine_choice import MIN_COSINE
from harness.compose import (
    GATEWAY,
    PROFILE,
    SERVER,
    ComposeStack,
    build_image,
    compose_file,
    install_tools,
    podman_environment,
    prepare_base_image,
    running_stack,
    unavailable_reason,
)
from harness.edge import tenant_toml
from harness.logs import record
from harness.requests import text_inputs
from harness.server import post_status
from server.edge.config import STATS_PATH
from server.health import child_pids
from server.launch import ADMIN_KEY_HEADER
from server.paths import REPO_ROOT

pytestmark = pytest.mark.container

DIMS = 384
MODEL = "all-MiniLM-L6-v2"
# An interactive tenant with two keys (one to revoke) and a bulk one for the
# drain, whose long requests would outwait the interactive queue deadlines.
KEY, SPARE_KEY, BULK_KEY = (secrets.token_urlsafe(24) for _ in range(3))
TENANTS = tenant_toml("search", [KEY, SPARE_KEY], [MODEL]) + tenant_toml(
    "batch", [BULK_KEY], [MODEL], priority="bulk"
)
REVOKED = tenant_toml("search", [KEY], [MODEL]) + tenant_toml(
    "batch", [BULK_KEY], [MODEL], priority="bulk"
)
RELOAD_TIMEOUT_S = 15.0
# The drain: bulk requests of long texts (truncated at 256 tokens), about
# 3 s of work on 2 cores, so that many are still in flight when the server's
# container gets SIGTERM.
IN_FLIGHT = 16
TEXTS_PER_REQUEST = 4
FIRST_ANSWER_TIMEOUT_S = 60.0
CLIENT_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeStack]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("compose_cpu")
    env = podman_environment(workdir)
    service = compose_file()["services"][SERVER]
    dockerfile = REPO_ROOT / service["build"]["context"] / service["build"]["dockerfile"]
    timings: dict[str, float] = {}
    started = time.monotonic()

    def lap(step: str) -> None:
        nonlocal started
        timings[step] = round(time.monotonic() - started, 1)
        started = time.monotonic()

    install_tools(env, workdir / "install.log")
    lap("tools")
    made = prepare_base_image(dockerfile, env, workdir, workdir / "base.log")
    lap("base image (debootstrap)" if made else "base image (present)")
    build_image(service, env, workdir / "build.log")
    lap("image build")
    with running_stack(env, workdir, TENANTS) as running:
        lap("up until ready")
        yield running
    lap("rest")
    # Shown with -s, or -rA; the logs stay in workdir.
    print(f"compose cpu profile: {json.dumps(timings)}; logs in {workdir}")


def _bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _client(stack: ComposeStack, protocol: str) -> Client:
    if protocol == "grpc":
        return grpcclient.InferenceServerClient(stack.grpc_url)
    return httpclient.InferenceServerClient(stack.http_url)


def _embed(stack: ComposeStack, protocol: str, key: str, texts: list[str]) -> np.ndarray:
    module = grpcclient if protocol == "grpc" else httpclient
    result = _client(stack, protocol).infer(MODEL, text_inputs(module, texts), headers=_bearer(key))
    return result.as_numpy("EMBEDDING")


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_held_out_texts_match_sentence_transformers(
    stack: ComposeStack, reference_embeddings: np.ndarray, protocol: str
) -> None:
    rows = _embed(stack, protocol, KEY, SAMPLE_TEXTS)
    assert rows.shape == (len(SAMPLE_TEXTS), DIMS * 4)
    vectors = np.frombuffer(rows.tobytes(), dtype="<f4").reshape(len(SAMPLE_TEXTS), DIMS)
    cosines = np.sum(vectors * reference_embeddings, axis=1)
    assert cosines.min() >= MIN_COSINE, dict(zip(SAMPLE_TEXTS, cosines.tolist(), strict=True))


def test_the_edge_refuses_requests_without_a_valid_key(stack: ComposeStack) -> None:
    texts = ["no key"]
    grpc = grpcclient.InferenceServerClient(stack.grpc_url)
    for headers in ({}, _bearer("not-a-key")):
        with pytest.raises(InferenceServerException) as refused:
            grpc.infer(MODEL, text_inputs(grpcclient, texts), headers=headers)
        assert refused.value.status() == "StatusCode.UNAUTHENTICATED", refused.value
    http = httpclient.InferenceServerClient(stack.http_url)
    with pytest.raises(InferenceServerException) as refused:
        http.infer(MODEL, text_inputs(httpclient, texts))
    assert refused.value.status() == "401", refused.value


def test_cpu_profile_starts_its_services_alone(stack: ComposeStack) -> None:
    """Running: the profile's services but those that run once, to
    completion, before another starts."""
    services = stack.podman(
        "ps",
        "--filter",
        f"label=io.podman.compose.project={stack.project}",
        "--format",
        '{{index .Labels "io.podman.compose.service"}}',
    ).split()
    profile = {
        name: service
        for name, service in compose_file()["services"].items()
        if PROFILE in service.get("profiles", [])
    }
    one_shot = {
        needed
        for service in profile.values()
        for needed, condition in service.get("depends_on", {}).items()
        if condition["condition"] == "service_completed_successfully"
    }
    long_running = sorted(set(profile) - one_shot)
    assert sorted(services) == long_running == sorted([SERVER, GATEWAY]), services


def _container_processes(stack: ComposeStack, service: str) -> dict[int, tuple[int, str]]:
    """pid -> (uid, name) of every process in the service's container, read
    from the host's /proc: rootful Podman maps no user ids."""
    inspected = json.loads(
        stack.podman("inspect", "--format", "{{json .State.Pid}}", stack.containers[service])
    )
    pending, processes = [int(inspected)], {}
    while pending:
        pid = pending.pop()
        proc = Path(f"/proc/{pid}")
        processes[pid] = (proc.stat().st_uid, (proc / "comm").read_text().strip())
        pending.extend(child_pids(pid))
    return processes


def test_server_runs_as_a_non_root_user_on_loopback_ports_behind_the_edge(
    stack: ComposeStack,
) -> None:
    processes = _container_processes(stack, SERVER)
    names = {name for _, name in processes.values()}
    # comm is cut at 15 characters
    assert {"tritonserver", "triton_python_b", "envoy"} <= names, names
    assert all(uid != 0 for uid, _ in processes.values()), processes
    for service in (SERVER, GATEWAY):
        published = stack.podman("port", stack.containers[service]).split()
        addresses = {entry.rsplit(":", 1)[0] for entry in published if ":" in entry}
        assert addresses == {"127.0.0.1"}, published
    # The admin APIs stay inside: the edge lets no tenant reach them, whatever
    # admin key it sends.
    index = f"http://{stack.http_url}/v2/repository/index"
    assert post_status(index, {ADMIN_KEY_HEADER: stack.admin_key}) == 401
    assert post_status(index, {ADMIN_KEY_HEADER: stack.admin_key, **_bearer(KEY)}) == 403


def test_health_checks_pass(stack: ComposeStack) -> None:
    """The image's HEALTHCHECK and the gateway's, run once each (Podman runs
    no health-check timers without systemd): an unhealthy one exits 1."""
    for service in (SERVER, GATEWAY):
        stack.podman("healthcheck", "run", stack.containers[service])


def test_gateway_service_answers_an_openai_request(
    stack: ComposeStack, reference_embeddings: np.ndarray
) -> None:
    # OpenAI rejects empty strings.
    kept = [index for index, text in enumerate(SAMPLE_TEXTS) if text]
    sdk = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key=KEY, max_retries=0)
    response = sdk.embeddings.create(model=MODEL, input=[SAMPLE_TEXTS[i] for i in kept])
    vectors = np.array([item.embedding for item in response.data], dtype=np.float32)
    cosines = np.sum(vectors * reference_embeddings[kept], axis=1)
    assert cosines.min() >= MIN_COSINE, cosines.tolist()
    # The gateway forwards the client's key; the edge refuses a wrong one.
    stranger = openai.OpenAI(base_url=f"{stack.gateway_url}/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.embeddings.create(model=MODEL, input=["text"])


def test_bad_option_is_invalid_arg(stack: ComposeStack) -> None:
    client = grpcclient.InferenceServerClient(stack.grpc_url)
    with pytest.raises(InferenceServerException) as raised:
        client.infer(
            MODEL,
            text_inputs(grpcclient, ["text"]),
            parameters={"dimensions": 999},
            headers=_bearer(KEY),
        )
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "invalid_parameter 'dimensions'" in raised.value.message()


def _scrape(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
        return reply.read().decode()


def test_prometheus_scrapes_per_tenant_stats_and_triton_metrics(stack: ComposeStack) -> None:
    """The published ports Prometheus scrapes: the edge's per-tenant stats
    (after the requests above) and, as without tenants, Triton's own metrics,
    which the autoscaling signal is computed from."""
    stats = _scrape(stack.edge_stats_port, STATS_PATH)
    answered = re.search(
        r'^envoy_cluster_upstream_rq_total\{envoy_cluster_name="tenant-search-grpc"\} (\d+)',
        stats,
        re.M,
    )
    assert answered and int(answered[1]) > 0, stats[-4000:]
    metrics = _scrape(stack.endpoints.metrics_port, "/metrics")
    assert re.search(r'^nv_inference_request_success\{model="tokenizer"', metrics, re.M), metrics[
        -4000:
    ]
    # Only the stats: the admin interface that could stop Envoy stays inside.
    with pytest.raises(urllib.error.HTTPError) as refused:
        _scrape(stack.edge_stats_port, "/quitquitquit")
    assert refused.value.code == 404


def test_a_key_removed_from_the_mounted_file_is_refused(stack: ComposeStack) -> None:
    """The file replaced on the host, as an editor saves it: the edge in the
    container sees it through the folder's mount and drops the key, without
    a restart; the key that stays keeps working."""
    assert _embed(stack, "grpc", SPARE_KEY, ["before"]).shape == (1, DIMS * 4)
    stack.write_tenants(REVOKED)
    deadline = time.monotonic() + RELOAD_TIMEOUT_S
    while True:
        try:
            _embed(stack, "grpc", SPARE_KEY, ["after"])
        except InferenceServerException as error:
            assert error.status() == "StatusCode.UNAUTHENTICATED", error
            break
        assert time.monotonic() < deadline, "the revoked key is still served"
        time.sleep(0.5)
    assert _embed(stack, "grpc", KEY, ["still"]).shape == (1, DIMS * 4)


def _tokenizer_answers(stack: ComposeStack) -> int:
    """From Triton's metrics: its statistics API is behind the edge."""
    metrics = _scrape(stack.endpoints.metrics_port, "/metrics")
    found = re.search(
        r'^nv_inference_request_success\{model="tokenizer"[^}]*\} (\d+)', metrics, re.M
    )
    assert found, metrics[-4000:]
    return int(found[1])


def _logged_at(log: str, logger: str, message: str) -> float:
    """The time stamp (Unix time) podman logs --timestamps put before the
    first JSON line of `logger` whose message starts with `message`."""
    match = None
    for line in log.splitlines():
        stamp, _, rest = line.partition(" ")
        found = record(rest)
        if found and found["logger"] == logger and str(found["message"]).startswith(message):
            match = re.fullmatch(r"(\S+)\.(\d+)(\S*)", stamp)
            break
    assert match, f"{logger}: {message!r} not in the container's log:\n{log[-4000:]}"
    # Python 3.11 reads at most microseconds.
    return datetime.fromisoformat(f"{match[1]}.{match[2][:6]}{match[3]}").timestamp()


def test_down_answers_the_requests_in_flight(stack: ComposeStack) -> None:
    """Runs last: `podman-compose down` while bulk requests are in flight.
    The launcher in the server's container stops the edge, which lets the
    requests in flight through it finish, then drains Triton and stops it,
    so every request is answered, some of them after the stop began, and the
    container stops on its own within stop_grace_period."""
    texts = [f"{index}. {LONG_TEXT}" for index in range(TEXTS_PER_REQUEST)]

    def call() -> tuple[str, float]:
        client = grpcclient.InferenceServerClient(stack.grpc_url)
        try:
            client.infer(
                MODEL,
                text_inputs(grpcclient, texts),
                headers=_bearer(BULK_KEY),
                client_timeout=CLIENT_TIMEOUT_S,
            )
        except InferenceServerException as error:
            return str(error.status()), time.time()
        return "OK", time.time()

    before = _tokenizer_answers(stack)
    with ThreadPoolExecutor(max_workers=IN_FLIGHT) as pool:
        futures = [pool.submit(call) for _ in range(IN_FLIGHT)]
        deadline = time.monotonic() + FIRST_ANSWER_TIMEOUT_S
        while _tokenizer_answers(stack) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        stack.down()
        down_s = time.monotonic() - started
        outcomes = [future.result() for future in futures]

    statuses = [status for status, _ in outcomes]
    assert statuses == ["OK"] * IN_FLIGHT, statuses
    log = stack.log_path(SERVER).read_text(errors="replace")
    stopping = _logged_at(log, "launcher", "stopping the edge")
    _logged_at(log, "launcher", "draining")
    _logged_at(log, "launcher", "stopping tritonserver")
    after = sum(answered > stopping for _, answered in outcomes)
    assert after > 0, "every request finished before the stop began: nothing was tested"
    grace = compose_file()["services"][SERVER]["stop_grace_period"]
    assert down_s < float(grace.removesuffix("s")), f"down took {down_s:.1f} s: killed?"
    assert not stack.labelled("container") and not stack.labelled("network")
