"""An OpenAI-compatible embeddings API (POST /v1/embeddings, GET /v1/models)
in front of the Triton embedding service, forwarding over gRPC."""
