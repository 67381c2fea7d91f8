"""Run the gateway of OpenAI's, Cohere's and TEI's APIs.

    embedding-gateway --triton-url 127.0.0.1:8001 \
        --model all-MiniLM-L6-v2=model_repository/shared/tokenizer/1/tokenizer.json \
        [--model NAME=TOKENIZER_JSON ...] [--reranker NAME ...] [--sparse NAME ...] \
        [--multivector NAME ...] [--m3 NAME=TOKENIZER_JSON ...] [--port 8080]
    embedding-gateway --triton-url 127.0.0.1:8001 --catalog models.toml \
        --model-repository model_repository --exports build/exports
    scripts/gateway.sh --triton-url 127.0.0.1:8001 --catalog models.toml

Each --model serves one of Triton's embedding models under its Triton name
at /v1/embeddings (OpenAI's API) and /embed (TEI's), with that model's
tokenizer.json; each --reranker one of its rerankers at /v1/rerank and
/v2/rerank (Cohere's API) and /rerank (TEI's); each --sparse one of its
sparse encoders at /embed_sparse (TEI's); each --multivector one of its
multi-vector encoders on the rerank routes, scored by MaxSim; each --m3 one of its BGE-M3
models, with its tokenizer.json, at the embedding routes (its dense vectors) and /embed_sparse
(its sparse head's weights). --catalog serves every model of
the catalog the server runs, by each of its names, each embedding model's
tokenizer.json found in its export: the packaged model's in the service's
model repository (--model-repository), the others' where the launcher
exported them (--exports; scripts/gateway.sh gives both from the
checkout). GET /openapi.json describes every route. With
EMBEDDING_GATEWAY_API_KEY set, every request but the health checks needs
`Authorization: Bearer <that key>`. It logs one JSON object a line, an
access line per request among them, unless --log-format text asks for its
human lines (logs.py). With --otlp-endpoint it sends spans of its own to
that OpenTelemetry collector (tracing.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from functools import partial
from pathlib import Path

from aiohttp import web
from embedding_catalog.tasks import EMBED, M3, MULTIVECTOR, RERANK, SPARSE
from embedding_client.options import listed
from embedding_client.tokenization import ClientTokenizer

from embedding_gateway.app import GatewaySettings, create_app
from embedding_gateway.catalog import ExportFolders, GatewayModel, gateway_catalog, tokenizes
from embedding_gateway.logs import (
    ACCESS_LOGGER,
    DEFAULT_FORMAT,
    FORMATS,
    JsonAccessLogger,
    configure_logging,
)
from embedding_gateway.served_models import a_kind
from embedding_gateway.tracing import add_tracing_arguments, settings_from_arguments

API_KEY_VARIABLE = "EMBEDDING_GATEWAY_API_KEY"
# Triton's model names (a folder name), which also fit in /v1/models/{model}.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# The option that serves a model of each task, repeated for more: NAME,
# or NAME=TOKENIZER_JSON where the gateway tokenizes the task's texts.
MODEL_OPTIONS = {
    EMBED.name: "--model",
    RERANK.name: "--reranker",
    SPARSE.name: "--sparse",
    MULTIVECTOR.name: "--multivector",
    M3.name: "--m3",
}


def triton_name(value: str) -> str:
    """A Triton model name, for argparse."""
    if not MODEL_NAME.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a Triton model name (letters, digits, '_', '-', '.')"
        )
    return value


def checked_tokenizer(model: GatewayModel) -> GatewayModel:
    """The model, where it has no tokenizer.json or one that loads."""
    if model.tokenizer is None:
        return model
    if not model.tokenizer.is_file():
        raise argparse.ArgumentTypeError(f"{model.name}: {model.tokenizer}: no such file")
    try:
        ClientTokenizer.from_file(model.tokenizer)
    except Exception as error:
        raise argparse.ArgumentTypeError(f"{model.name}: {model.tokenizer}: {error}") from error
    return model


def model_argument(task: str, value: str) -> GatewayModel:
    """A model of `task`, for argparse: NAME=TOKENIZER_JSON where the
    gateway tokenizes the task's texts, NAME otherwise."""
    if not tokenizes(task):
        return GatewayModel(triton_name(value), None, task)
    name, separator, tokenizer = value.partition("=")
    if not separator or not tokenizer:
        raise argparse.ArgumentTypeError(f"{value!r} is not NAME=TOKENIZER_JSON")
    return checked_tokenizer(GatewayModel(triton_name(name), Path(tokenizer), task))


def _add_catalog(args: argparse.Namespace, path: Path) -> str | None:
    """Adds the catalog's models to those named one by one; or why not."""
    folders = ExportFolders(args.model_repository, args.exports)
    catalog = gateway_catalog(path.resolve(), folders)
    if isinstance(catalog, str):
        return catalog
    try:
        args.models = [*args.models, *(checked_tokenizer(model) for model in catalog)]
    except argparse.ArgumentTypeError as error:
        return str(error)
    return None


def _add_models(parser: argparse.ArgumentParser) -> None:
    """What to serve: models one by one, or a catalog's."""
    for task, option in MODEL_OPTIONS.items():
        tokenized = tokenizes(task)
        parser.add_argument(
            option,
            dest="models",
            type=partial(model_argument, task),
            action="append",
            default=[],
            metavar="NAME=TOKENIZER_JSON" if tokenized else "NAME",
            help=f"{a_kind(task)} to serve: its Triton name, which requests call it by"
            + (", and its tokenizer.json" if tokenized else "")
            + " (repeat for more)",
        )
    parser.add_argument(
        "--catalog",
        type=Path,
        metavar="FILE",
        help="serve every model of the service's catalog, by name, each embedding model's "
        "tokenizer.json from its export (see --model-repository and --exports)",
    )
    parser.add_argument(
        "--model-repository",
        type=Path,
        metavar="DIR",
        help="with --catalog: the service's model repository, the packaged model's export",
    )
    parser.add_argument(
        "--exports",
        type=Path,
        metavar="DIR",
        help="with --catalog: where the launcher exports the catalog's other models "
        "(build/exports in the service's checkout)",
    )


def _add_serving(parser: argparse.ArgumentParser) -> None:
    """How to serve: Triton's load, keys, the address, the log."""
    defaults = GatewaySettings("", ())
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=defaults.max_in_flight,
        help="requests the gateway keeps in flight to Triton at once, all models together",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=defaults.priority,
        help="Triton priority level of forwarded requests; 0 is the model's default",
    )
    parser.add_argument(
        "--forward-api-key",
        action="store_true",
        help="pass each client's Authorization key on to Triton, for a server with tenants "
        "whose edge checks it (docs/operations.md, 'Tenants'), instead of checking "
        f"{API_KEY_VARIABLE} here",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default=DEFAULT_FORMAT,
        help="json: one JSON object per line (time, level, logger, message), with an access "
        "line per request (method, path, status, duration_ms, the request's trace_id); text: "
        "the human lines, no access lines (default: %(default)s)",
    )


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embedding-gateway", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--triton-url", required=True, help="Triton's gRPC host:port")
    _add_models(parser)
    _add_serving(parser)
    add_tracing_arguments(parser)
    return parser


def parse_settings(argv: list[str] | None) -> tuple[GatewaySettings, str, int]:
    parser = argument_parser()
    return settings_from(parser, parser.parse_args(argv))


def settings_from(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[GatewaySettings, str, int]:
    """The gateway's settings, address and port from its parsed arguments;
    what they cannot mean together fails as a usage error."""
    if args.catalog is not None:
        refusal = _add_catalog(args, args.catalog)
        if refusal:
            parser.error(refusal)
    names = [model.name for model in args.models]
    if not names:
        parser.error(f"give at least one {listed(list(MODEL_OPTIONS.values()))}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        parser.error(f"the model {repeated[0]} is given more than once")
    api_key = os.environ.get(API_KEY_VARIABLE) or None
    if api_key and args.forward_api_key:
        parser.error(
            f"--forward-api-key leaves keys to the server's edge: unset {API_KEY_VARIABLE}"
        )
    settings = GatewaySettings(
        args.triton_url,
        tuple(args.models),
        api_key,
        args.max_in_flight,
        args.priority,
        args.forward_api_key,
        settings_from_arguments(args),
    )
    return settings, args.host, args.port


def main(argv: list[str] | None = None) -> None:
    parser = argument_parser()
    args = parser.parse_args(argv)
    settings, host, port = settings_from(parser, args)
    configure_logging(args.log_format)
    names = ", ".join(repr(model.name) for model in settings.models)
    started = (
        f"http://{host}:{port}/v1 -> Triton gRPC {settings.triton_url}, "
        f"models {names}, priority {settings.priority}, "
        f"auth {'forwarded' if settings.forward_api_key else 'on' if settings.api_key else 'off'}"
    )
    if settings.tracing is not None:
        started += f", {settings.tracing.describe()}"
    if args.log_format == "text":
        print(f"embedding-gateway: {started}", flush=True)
        # The text log has never had access lines.
        web.run_app(create_app(settings), host=host, port=port, access_log=None, print=None)
        return
    # Not __name__, which is __main__ under `python -m`.
    logging.getLogger("embedding_gateway").info(started)
    web.run_app(
        create_app(settings),
        host=host,
        port=port,
        access_log=logging.getLogger(ACCESS_LOGGER),
        access_log_class=JsonAccessLogger,
        print=None,
    )


if __name__ == "__main__":
    main()
