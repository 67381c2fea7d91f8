"""The test Hub's repositories (harness/hub.py): model folders published as
bare git repositories at MIRRORS/models/ORG/NAME, the layout olah's local
mirrors take (olah/server_mirror.py), and the revision and file look-ups the
front (harness/hub_front.py) answers itself where olah answers unlike the Hub.

Files are committed as plain git blobs, not LFS pointers: olah serves them
as they are, with the blob id as ETag, as the Hub does for files kept out of
LFS."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

BRANCH = "main"
# The same identity on every machine, and no user or system git config
# (signing, hooks, LFS filters) can change what a publish commits.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Hub Harness",
    "GIT_AUTHOR_EMAIL": "hub-harness@localhost",
    "GIT_COMMITTER_NAME": "Hub Harness",
    "GIT_COMMITTER_EMAIL": "hub-harness@localhost",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def repository_path(repo_id: str, mirrors: Path) -> Path:
    """Where olah looks for model `repo_id` ("org/name") under `mirrors`."""
    org, name = repo_id.split("/")
    return mirrors.resolve() / "models" / org / name


def _git(
    repository: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> str:
    command = ["git", "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"]
    command += [f"--git-dir={repository}", *args]
    done = subprocess.run(
        command,
        env={**os.environ, **GIT_ENV, **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def resolve(repository: Path, revision: str) -> str | None:
    """The commit `revision` (branch, tag or sha) names in `repository`, or
    None where it names none."""
    if revision.startswith("-"):
        return None
    try:
        return _git(repository, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    except subprocess.CalledProcessError:
        return None


def has_file(repository: Path, commit: str, path: str) -> bool:
    """Whether `path` is a file (not a folder) in `commit`."""
    try:
        return _git(repository, "cat-file", "-t", f"{commit}:{path}") == "blob"
    except subprocess.CalledProcessError:
        return False


def publish(folder: Path, repo_id: str, mirrors: Path) -> str:
    """Commits `folder`'s files as the whole content of `repo_id` on branch
    main, a new commit on top of the last publish, and returns its sha.

    The commit is built with a throwaway index and `folder` as work tree, so
    `folder` is neither copied nor written to; `add --force` takes files a
    .gitignore in it would skip, as an upload to the Hub would."""
    repository = repository_path(repo_id, mirrors)
    if not (repository / "HEAD").exists():
        repository.mkdir(parents=True, exist_ok=True)
        _git(repository, "init", "--quiet", "--bare", f"--initial-branch={BRANCH}")
    folder = folder.resolve()
    with tempfile.TemporaryDirectory() as scratch:
        work = {"GIT_WORK_TREE": str(folder), "GIT_INDEX_FILE": f"{scratch}/index"}
        _git(repository, "add", "--all", "--force", ".", env=work, cwd=folder)
        tree = _git(repository, "write-tree", env=work)
    parent = resolve(repository, f"refs/heads/{BRANCH}")
    parents = ["-p", parent] if parent else []
    sha = _git(repository, "commit-tree", tree, *parents, "-m", f"Publish {folder.name}")
    # The old value guards against a concurrent publish to the same repository.
    _git(repository, "update-ref", f"refs/heads/{BRANCH}", sha, parent or "")
    return sha


def tag(repo_id: str, mirrors: Path, name: str) -> str:
    """Tags the last published commit of `repo_id` as `name` (a revision the
    Hub resolves like a branch) and returns that commit's sha."""
    repository = repository_path(repo_id, mirrors)
    sha = resolve(repository, f"refs/heads/{BRANCH}")
    if sha is None:
        raise ValueError(f"{repo_id} has no published commit in {mirrors}")
    _git(repository, "update-ref", f"refs/tags/{name}", sha)
    return sha
