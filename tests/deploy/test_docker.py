"""deploy/docker: the Dockerfile (hadolint and what it must contain), the
scripts (shellcheck) and the compose file (the compose-spec schema and the
cluster it describes). No Docker engine runs here: the image's start script
runs for real in test_entrypoint.py."""

from __future__ import annotations

import fnmatch
import json
import os
import stat
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.deploy.deploy_kit import (
    COMPOSE, CTL, DOCKERFILE, ENTRYPOINT, REPO_ROOT, entrypoint_variables, hadolint, image_env,
    run, tool,
)

SCHEMA = Path(__file__).parent / "compose_schema" / "compose-spec.json"


def instructions(stage: int = -1) -> list[tuple[str, str]]:
    """(INSTRUCTION, value) of one build stage (the last by default)."""
    from dockerfile_parse import DockerfileParser

    stages: list[list[tuple[str, str]]] = []
    for i in DockerfileParser(path=str(DOCKERFILE)).structure:
        if i["instruction"] == "FROM":
            stages.append([])
        if stages and i["instruction"] != "COMMENT":
            stages[-1].append((i["instruction"], i["value"]))
    return stages[stage]


def values(stage: list[tuple[str, str]], name: str) -> list[str]:
    return [v for k, v in stage if k == name]


def test_dockerfile_passes_hadolint():
    res = run([hadolint(), "--no-color", "--failure-threshold", "info", str(DOCKERFILE)])
    assert res.returncode == 0, res.stdout + res.stderr


def test_scripts_pass_shellcheck():
    res = run([tool("shellcheck"), "--shell=sh", "--severity=style", str(ENTRYPOINT), str(CTL)])
    assert res.returncode == 0, res.stdout + res.stderr


def test_image_runs_the_node_as_the_deploy_files_expect():
    build, final = instructions(0), instructions(-1)
    # The project is installed with pip from the build context.
    assert ("COPY", ". .") in build
    assert any(v.startswith("pip wheel") and v.endswith(" .") for v in values(build, "RUN"))
    assert any("pip install" in v and "/wheels" in v for v in values(final, "RUN"))

    assert values(final, "FROM")[0].startswith("python:3.11-slim")
    user = values(final, "USER")[-1].split(":")
    assert user[0] not in ("root", "0") and int(user[0]) > 0, "the node must not run as root"
    env = image_env()
    assert json.loads(values(final, "VOLUME")[-1]) == [env["DISQUETTE_DIR"]]
    port = int(env["DISQUETTE_PORT"])
    assert values(final, "EXPOSE")[-1].split() == [str(port), str(port + 10000)]
    for name in ("DISQUETTE_ANNOUNCE_IP", "DISQUETTE_ANNOUNCE_PORT", "DISQUETTE_ANNOUNCE_BUS_PORT",
                 "DISQUETTE_SEEDS"):
        assert name in env, f"the image does not document {name}"
    assert set(env) - {"PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PIP_NO_CACHE_DIR",
                       "PIP_DISABLE_PIP_VERSION_CHECK"} <= set(entrypoint_variables())

    health = values(final, "HEALTHCHECK")[-1]
    assert json.loads(health.split("CMD", 1)[1]) == ["disquette-ctl", "ready"]
    assert json.loads(values(final, "ENTRYPOINT")[-1]) == ["disquette-entrypoint"]

    # The scripts the image installs exist, are executable, and are the ones
    # the instructions name.
    copied = {}
    for v in values(final, "COPY"):
        *_, src, dst = v.split()
        copied[os.path.basename(dst)] = REPO_ROOT / src
    assert copied["disquette-entrypoint"] == ENTRYPOINT
    assert copied["disquette-ctl"] == CTL
    for path in copied.values():
        assert path.stat().st_mode & stat.S_IXUSR, f"{path} is not executable"


def test_build_context_keeps_what_the_image_needs():
    ignore = [line.strip() for line in
              (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    needed = ["pyproject.toml", project["project"]["readme"],
              str(ENTRYPOINT.relative_to(REPO_ROOT)), str(CTL.relative_to(REPO_ROOT))]
    needed += [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    for path in needed:
        for pattern in ignore:
            assert not fnmatch.fnmatch(path, pattern) and not path.startswith(pattern + "/"), \
                f"{path} is excluded from the build context by {pattern!r}"
    for junk in (".venv", ".git", "run"):
        assert junk in ignore


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_file_matches_the_compose_spec_schema(compose):
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(compose)]
    assert errors == []


def test_compose_describes_a_three_node_cluster_joined_by_seeds(compose):
    services = compose["services"]
    assert len(services) == 3
    port = image_env()["DISQUETTE_PORT"]
    known = entrypoint_variables()
    seeds = set()
    for name, svc in services.items():
        build = svc["build"]
        assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
        env = svc["environment"]
        assert set(env) <= set(known), f"{name}: variables the entrypoint ignores"
        seeds.add(env["DISQUETTE_SEEDS"])
        assert [v.split(":")[1] for v in svc["volumes"]] == [image_env()["DISQUETTE_DIR"]]
        assert svc["volumes"][0].split(":")[0] in compose["volumes"]
        assert svc["ports"][0].endswith(f":{port}")
    # The same seeds on every node, naming every node at its client port.
    assert len(seeds) == 1
    assert sorted(seeds.pop().split(",")) == sorted(f"{name}:{port}" for name in services)
    # One volume each: a node's id (nodes.conf) and AOF are its own.
    assert len({svc["volumes"][0] for svc in services.values()}) == 3
