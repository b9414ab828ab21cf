"""docker/: the compose file's services, and that its commands are real autotune commands.

No Docker engine runs here; Debian's docker-compose validates the file (CI installs it, .ci/run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from sqlalchemy.engine import make_url

import autotune.cli
from autotune.urls import engine_url

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
# `${NAME:-default}`: what docker compose substitutes when NAME is not set.
_VARIABLE = re.compile(r"\$\{(\w+):-([^}]*)\}")


def _defaults(value: Any) -> Any:
    if isinstance(value, str):
        return _VARIABLE.sub(lambda match: match.group(2), value)
    if isinstance(value, list):
        return [_defaults(item) for item in value]
    if isinstance(value, dict):
        return {key: _defaults(item) for key, item in value.items()}
    return value


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    return _defaults(compose["services"])


def _parse_autotune(args: list[str]) -> dict[str, Any]:
    """Parse a command line with the real CLI, validating its options without running it."""
    group = typer.main.get_command(autotune.cli.app)
    context = group.make_context("autotune", list(args))
    command = group.get_command(context, args[0])  # type: ignore[attr-defined]
    assert command is not None, f"`autotune {args[0]}` is not an autotune command"
    return dict(command.make_context(args[0], list(args[1:]), parent=context).params)


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_compose_has_postgres_search_workers_and_dashboard(services: dict[str, Any]) -> None:
    assert {"postgres", "search", "worker", "dashboard"} <= set(services)
    assert services["postgres"]["healthcheck"]["test"][-1].startswith("pg_isready")
    for name in ("search", "worker", "dashboard"):
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "container_name" not in services["worker"]  # a fixed name would forbid --scale worker=N
    assert "ports" not in services["worker"]


def test_worker_joins_the_study_that_search_creates_on_the_postgres_service(
    services: dict[str, Any],
) -> None:
    worker, search = services["worker"]["command"], services["search"]["command"]
    params = _parse_autotune(worker)
    assert worker[0] == "worker"
    assert params["study"] == _option(search, "--study")
    assert params["storage"] == _option(search, "--storage")
    url = make_url(engine_url(params["storage"]))
    assert url.host == "postgres"
    assert url.get_dialect().driver == "psycopg"  # the image's postgres extra
    env = services["postgres"]["environment"]
    assert (url.username, url.password, url.database) == (
        env["POSTGRES_USER"],
        env["POSTGRES_PASSWORD"],
        env["POSTGRES_DB"],
    )


def test_search_command_is_a_real_search(services: dict[str, Any]) -> None:
    params = _parse_autotune(services["search"]["command"])
    assert params["model"] == "tiny-gpt2"
    assert params["storage"] == services["dashboard"]["command"][0]  # the dashboard reads the same store


def test_images_install_the_project_with_pinned_torch() -> None:
    makefile = (ROOT / "Makefile").read_text()
    torch_version = re.search(r"TORCH_VERSION \?= (\S+)", makefile).group(1)  # type: ignore[union-attr]
    pyproject = (ROOT / "pyproject.toml").read_text()
    section = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^(\w+) = \[", section, re.MULTILINE))
    assert "postgres" in extras
    for flavour in ("cpu", "cuda"):
        text = (DOCKER / f"Dockerfile.{flavour}").read_text()
        assert f"ARG TORCH_VERSION={torch_version}" in text
        assert 'ENTRYPOINT ["autotune"]' in text
        assert ("download.pytorch.org/whl/cpu" in text) == (flavour == "cpu")
        wanted = re.search(r"ARG EXTRAS=(\S+)", text).group(1).split(",")  # type: ignore[union-attr]
        assert set(wanted) <= extras
        assert {"postgres", "dashboard"} <= set(wanted)


@pytest.mark.parametrize(
    "files", [["compose.yaml"], ["compose.yaml", "compose.gpu.yaml"]], ids=["base", "with-gpu-override"]
)
def test_docker_compose_validates_the_files(files: list[str]) -> None:
    binary = shutil.which("docker-compose")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose is missing: .ci/run installs it (apt-get install docker-compose)")
        pytest.skip("docker-compose is not installed (apt-get install docker-compose); CI installs it")
    args = [binary]
    for name in files:
        args += ["-f", str(DOCKER / name)]
    result = subprocess.run([*args, "config", "-q"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr


def test_the_dashboard_is_published_on_the_hosts_loopback_only(services: dict[str, Any]) -> None:
    ports = services["dashboard"]["ports"]
    assert ports and all(str(port).startswith("127.0.0.1:") for port in ports)
    for name in ("postgres", "search", "worker"):
        assert "ports" not in services[name]  # nothing else is published


def test_pool_members_are_not_given_one_fixed_seed(services: dict[str, Any]) -> None:
    # Replicas share their command line: a --seed there would be every member's. Each member's
    # sampler seed comes from the study's seed and its own identity (`member_seed`).
    assert "--seed" not in services["worker"]["command"]
