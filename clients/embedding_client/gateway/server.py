"""Run the OpenAI-compatible embeddings gateway.

    embedding-gateway --triton-url 127.0.0.1:8001 \
        --tokenizer model_repository/shared/tokenizer/1/tokenizer.json [--port 8080]

With EMBEDDING_GATEWAY_API_KEY set, every /v1 request needs
`Authorization: Bearer <that key>`.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from aiohttp import web

from embedding_client.gateway.app import GatewaySettings, create_app

API_KEY_VARIABLE = "EMBEDDING_GATEWAY_API_KEY"


def parse_settings(argv: list[str] | None) -> tuple[GatewaySettings, str, int]:
    defaults = GatewaySettings("", Path())
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--triton-url", required=True, help="Triton's gRPC host:port")
    parser.add_argument("--tokenizer", type=Path, required=True, help="the server's tokenizer.json")
    parser.add_argument("--model-name", default=defaults.model_name)
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=defaults.max_in_flight,
        help="requests the gateway keeps in flight to Triton at once",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=defaults.priority,
        help="Triton priority level of forwarded requests; 0 is the model's default",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    if not args.tokenizer.is_file():
        parser.error(f"--tokenizer {args.tokenizer}: no such file")
    settings = GatewaySettings(
        args.triton_url,
        args.tokenizer,
        args.model_name,
        os.environ.get(API_KEY_VARIABLE) or None,
        args.max_in_flight,
        args.priority,
    )
    return settings, args.host, args.port


def main(argv: list[str] | None = None) -> None:
    settings, host, port = parse_settings(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    print(
        f"embedding-gateway: http://{host}:{port}/v1 -> Triton gRPC {settings.triton_url}, "
        f"model {settings.model_name!r}, priority {settings.priority}, "
        f"auth {'on' if settings.api_key else 'off'}",
        flush=True,
    )
    web.run_app(create_app(settings), host=host, port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
