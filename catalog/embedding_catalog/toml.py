"""TOML for the catalog and the tenants file: the standard library's tomllib
(Python 3.11+), or the same parser as the tomli package on the GPU image's
Python 3.10, which docker/triton.Dockerfile installs from
requirements/launcher.txt."""

try:
    from tomllib import TOMLDecodeError, loads
except ModuleNotFoundError:
    from tomli import TOMLDecodeError, loads

__all__ = ["TOMLDecodeError", "loads"]
