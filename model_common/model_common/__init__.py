"""What the Python-backend models of model_repository/ share: the error
kinds, the request-option check and the token checks, so every first stage
refuses a bad request the same way before any work is spent on it.

Pure Python and numpy except `model_common.triton`, which only a Triton
Python-backend stub can import."""
