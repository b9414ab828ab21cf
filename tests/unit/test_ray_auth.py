"""Joining a Ray cluster with token authentication, without a cluster: where the token is taken
from (Ray's order, checked against Ray's own loader), the mode that sends it, and the one line a
refused token gives. `tests/integration/test_ray.py` joins a real head."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import ray_auth
from autotune.errors import RayTokenError

pytest.importorskip("ray")
pytestmark = pytest.mark.timeout(120)

AUTH_VARS = (ray_auth.MODE_ENV, ray_auth.TOKEN_ENV, ray_auth.TOKEN_PATH_ENV)


def _home_with_token(tmp_path: Path, token: str = "home-token") -> Path:
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(token)
    return home


def _in_fresh_process(code: str, home: Path, **env: str) -> dict:
    """Run `code` (which prints one JSON value) in a fresh interpreter with `home` and `env`: Ray's
    token loader and config are per process, and turning token mode on changes this one's."""
    environ = {k: v for k, v in os.environ.items() if k not in AUTH_VARS}
    environ.update(HOME=str(home), PYTHONPATH=os.getcwd(), **env)
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, capture_output=True, text=True, env=environ, timeout=90)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_token_is_taken_in_rays_order(tmp_path: Path) -> None:
    home = _home_with_token(tmp_path)
    path_file = tmp_path / "token"
    path_file.write_text("path-token")
    both = {ray_auth.TOKEN_ENV: "env-token", ray_auth.TOKEN_PATH_ENV: str(path_file)}
    assert ray_auth.token_source(both, home) == "RAY_AUTH_TOKEN"
    assert ray_auth.token_source({**both, ray_auth.TOKEN_ENV: ""}, home) == f"RAY_AUTH_TOKEN_PATH={path_file}"
    assert ray_auth.token_source({}, home) == str(home / ".ray" / "auth_token")
    assert ray_auth.token_source({}, tmp_path / "nobody") is None


def test_the_order_is_rays_own(tmp_path: Path) -> None:
    """Ray's loader, asked in a fresh process for each case, takes the token that `token_source`
    names."""
    home = _home_with_token(tmp_path)
    path_file = tmp_path / "token"
    path_file.write_text("path-token")
    code = (
        "import json\nfrom ray._raylet import AuthenticationTokenLoader as L\n"
        "print(json.dumps(L.instance().get_raw_token(ignore_auth_mode=True) or None))"
    )
    held = {"RAY_AUTH_TOKEN": "env-token", f"RAY_AUTH_TOKEN_PATH={path_file}": "path-token"}
    held[str(home / ".ray" / "auth_token")] = "home-token"
    cases = [
        {ray_auth.TOKEN_ENV: "env-token", ray_auth.TOKEN_PATH_ENV: str(path_file)},
        {ray_auth.TOKEN_PATH_ENV: str(path_file)},
        {ray_auth.TOKEN_ENV: ""},
    ]
    for env in cases:
        source = ray_auth.token_source(env, home)
        assert source is not None and _in_fresh_process(code, home, **env) == held[source], env


def test_token_mode_is_turned_on_when_a_token_is_found(tmp_path: Path) -> None:
    code = (
        "import json, os\nfrom autotune.ray_auth import enable_token_mode\n"
        "from ray._raylet import AuthenticationMode, get_authentication_mode\n"
        "source = enable_token_mode()\n"
        "print(json.dumps([source, os.environ.get('RAY_AUTH_MODE'),"
        " get_authentication_mode() == AuthenticationMode.TOKEN]))"
    )
    home = _home_with_token(tmp_path)
    assert _in_fresh_process(code, home) == [str(home / ".ray" / "auth_token"), "token", True]
    # an explicit mode is the user's; no token, nothing to send
    assert _in_fresh_process(code, home, RAY_AUTH_MODE="disabled") == [None, "disabled", False]
    assert _in_fresh_process(code, tmp_path / "nobody") == [None, None, False]


def test_an_unreadable_token_path_is_one_line(tmp_path: Path) -> None:
    code = (
        "import json\nfrom autotune.ray_auth import enable_token_mode\n"
        "from autotune.errors import RayTokenError\n"
        "try:\n    enable_token_mode()\nexcept RayTokenError as exc:\n    print(json.dumps(str(exc)))"
    )
    missing = tmp_path / "missing"
    text = _in_fresh_process(code, tmp_path, RAY_AUTH_TOKEN_PATH=str(missing))
    assert text.startswith(f"RAY_AUTH_TOKEN_PATH={missing}: Ray cannot read a token there")
    assert "\n" not in text


@pytest.mark.parametrize(
    ("found", "env", "expected"),
    [
        (None, {}, f"requires a token, and none was found ({ray_auth.WHERE_LOOKED})"),
        ("/home/u/.ray/auth_token", {}, "refused the token from /home/u/.ray/auth_token"),
        (None, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "x"}, "refused the token from RAY_AUTH_TOKEN"),
        (None, {"RAY_AUTH_MODE": "disabled"}, "requires a token, and RAY_AUTH_MODE=disabled keeps this"),
    ],
)
def test_a_refused_token_is_one_line_naming_it_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, found: str | None, env: dict[str, str], expected: str
) -> None:
    monkeypatch.setattr(ray_auth, "enable_token_mode", lambda: found)
    monkeypatch.setattr(ray_auth, "_probe", lambda address, timeout_s: "refused")
    for name in AUTH_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RayTokenError) as info:
        ray_auth.check_token("10.0.0.5:6379")
    text = str(info.value)
    assert text.startswith(f"the Ray cluster at 10.0.0.5:6379 {expected}") and "\n" not in text
    assert info.value.exit_code == 1
    disabled = env.get("RAY_AUTH_MODE") == "disabled"
    fix = "unset RAY_AUTH_MODE" if disabled else "copy the head's ~/.ray/auth_token to this machine"
    assert fix in (info.value.hint or "")


def test_token_mode_is_turned_on_only_for_a_head_that_requires_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver in token mode makes the cluster's workers expect a token: a head without token
    authentication is joined as it is, whatever token lies around."""
    for name in AUTH_VARS:
        monkeypatch.delenv(name, raising=False)
    enabled: list[bool] = []

    def enable() -> str:
        enabled.append(True)
        monkeypatch.setenv("RAY_AUTH_MODE", "token")
        return "~/.ray/auth_token"

    monkeypatch.setattr(ray_auth, "enable_token_mode", enable)
    answers = {"ok": ["ok"], "unknown": ["unknown"], "requires": ["refused", "ok"]}
    for head, replies in answers.items():
        queue = list(replies)
        monkeypatch.setattr(ray_auth, "_probe", lambda address, timeout_s, queue=queue: queue.pop(0))
        ray_auth.check_token("10.0.0.5:6379")
        assert enabled == ([True] if head == "requires" else []), head
