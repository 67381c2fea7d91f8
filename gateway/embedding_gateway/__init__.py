"""The gateway of OpenAI's, Cohere's and TEI's HTTP APIs in front of the
Triton embedding service, forwarding over gRPC with the client library
(embedding_client); `embedding-gateway` runs it (server.py). Each API's
bodies are declared once as schemas (openai_api.py, cohere_api.py,
tei_api.py, errors.py), from which requests are validated, refusals worded
and GET /openapi.json written."""
