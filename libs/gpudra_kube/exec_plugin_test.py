"""Exec credential plugins run as client-go runs them: what the plugin is given (environment,
`KUBERNETES_EXEC_INFO`, stdin), where its stderr goes, and the errors a service logs when it
cannot run. Each test loads a kubeconfig through `load_api_client`, as the services do."""

from __future__ import annotations

import base64
import json
import os
import pty
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpudra_kube.api_backend import load_api_client
from gpudra_kube.credentials_test import CA_PEM
from gpudra_kube.errors import InvalidObjectError
from gpudra_kube.kubeconfig_test import list_claims
from gpudra_testing.kubeapi import FakeKubeApi

# The plugin: records what it was given, says something on stderr, answers with the token in
# `token` (or exits with the code in `exit-code`). `plugin` is a shell script that runs it with
# this interpreter (a shebang naming the interpreter could pass the kernel's length limit).
PLUGIN = """
import json, os, pathlib, sys
folder = pathlib.Path(__file__).parent
stdin = "/proc/self/fd/0"
(folder / "seen.json").write_text(json.dumps({
    "env": dict(os.environ),
    "args": sys.argv[1:],
    "stdin_is_null": os.path.samefile("/dev/null", stdin) if os.path.exists(stdin) else None,
}))
print("plugin: fetching a token", file=sys.stderr)
code = folder / "exit-code"
if code.exists():
    print("plugin: no session, run login first", file=sys.stderr)
    sys.exit(int(code.read_text()))
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
    "status": {"token": (folder / "token").read_text()},
}))
"""
LAUNCHER = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$(dirname "$0")/plugin.py" "$@"\n'


def install_plugin(folder: Path, token: str = "exec-token") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin.py").write_text(PLUGIN, encoding="utf-8")
    plugin = folder / "plugin"
    plugin.write_text(LAUNCHER, encoding="utf-8")
    plugin.chmod(0o755)
    (folder / "token").write_text(token, encoding="utf-8")
    return plugin


def seen(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "seen.json").read_text(encoding="utf-8"))
    return data


def write_kubeconfig(
    path: Path, server: str, exec_: dict[str, Any], cluster: dict[str, Any] | None = None
) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": {"exec": exec_}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def exec_stanza(command: str, **more: Any) -> dict[str, Any]:
    return {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": command,
        "interactiveMode": "Never",
        **more,
    }


async def list_with_plugin(
    kube_api: FakeKubeApi,
    tmp_path: Path,
    plugin: Path,
    cluster: dict[str, Any] | None = None,
    **stanza: Any,
) -> None:
    """List claims once through a kubeconfig (in `tmp_path`) whose user runs `plugin` with
    `exec_stanza`'s fields and `stanza`; the API accepts the plugin's token."""
    kube_api.accept_tokens("exec-token")
    await list_claims(
        write_kubeconfig(
            tmp_path / "kubeconfig", kube_api.url, exec_stanza(str(plugin), **stanza), cluster
        )
    )


async def test_a_relative_command_with_a_slash_is_found_beside_the_kubeconfig(
    kube_api: FakeKubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_plugin(tmp_path / "bin")
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", kube_api.url, exec_stanza("./bin/plugin")
    )
    monkeypatch.chdir("/")  # not the kubeconfig's folder
    kube_api.accept_tokens("exec-token")
    await list_claims(kubeconfig)


async def test_args_and_env_reach_the_plugin(kube_api: FakeKubeApi, tmp_path: Path) -> None:
    plugin = install_plugin(tmp_path)
    await list_with_plugin(
        kube_api,
        tmp_path,
        plugin,
        args=["get-token", "--cluster", "c"],
        env=[{"name": "REGION", "value": "x"}],
    )
    assert seen(tmp_path)["args"] == ["get-token", "--cluster", "c"]
    assert seen(tmp_path)["env"]["REGION"] == "x"


async def test_the_plugins_stderr_passes_through(
    kube_api: FakeKubeApi, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """client-go hands the plugin its own stderr: warnings and prompts reach the log."""
    plugin = install_plugin(tmp_path)
    await list_with_plugin(kube_api, tmp_path, plugin)
    assert "plugin: fetching a token" in capfd.readouterr().err


async def test_a_missing_executable_is_named_with_its_install_hint(tmp_path: Path) -> None:
    stanza = exec_stanza("no-such-auth-plugin", installHint="install it with: brew install x")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1", stanza)
    with pytest.raises(InvalidObjectError) as info:
        await load_api_client(str(kubeconfig))
    message = str(info.value)
    assert "exec: executable no-such-auth-plugin not found" in message
    assert "install it with: brew install x" in message


async def test_a_failing_plugin_names_the_executable_and_its_exit_code(tmp_path: Path) -> None:
    plugin = install_plugin(tmp_path)
    (tmp_path / "exit-code").write_text("3", encoding="utf-8")
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", "http://127.0.0.1:1", exec_stanza(str(plugin))
    )
    with pytest.raises(InvalidObjectError) as info:
        await load_api_client(str(kubeconfig))
    message = str(info.value)
    assert f"exec: executable {plugin} failed with exit code 3" in message
    assert "run login first" in message


@pytest.fixture
def _terminal_stdin() -> Iterator[None]:
    """Our stdin (file descriptor 0, which a plugin inherits) is a terminal, as under kubectl in
    a shell: a pseudo-terminal put in its place for the test."""
    leader, follower = pty.openpty()
    saved = os.dup(0)
    os.dup2(follower, 0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        for fd in (saved, leader, follower):
            os.close(fd)


def exec_info(folder: Path) -> dict[str, Any]:
    info: dict[str, Any] = json.loads(seen(folder)["env"]["KUBERNETES_EXEC_INFO"])
    return info


@pytest.mark.parametrize(
    ("mode", "interactive"),
    [
        pytest.param("Never", False, id="never"),
        pytest.param("IfAvailable", True, id="if-available"),
    ],
)
@pytest.mark.usefixtures("_terminal_stdin")
async def test_interactive_mode_with_a_terminal(
    kube_api: FakeKubeApi, tmp_path: Path, mode: str, interactive: bool
) -> None:
    plugin = install_plugin(tmp_path)
    await list_with_plugin(kube_api, tmp_path, plugin, interactiveMode=mode)
    assert exec_info(tmp_path)["spec"]["interactive"] is interactive


@pytest.mark.usefixtures("_terminal_stdin")
async def test_a_plugin_that_is_not_interactive_gets_no_stdin(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    plugin = install_plugin(tmp_path)
    await list_with_plugin(kube_api, tmp_path, plugin)
    assert seen(tmp_path)["stdin_is_null"] is True


@pytest.mark.parametrize(
    ("stanza", "error"),
    [
        pytest.param(
            {"interactiveMode": "Always"},
            "exec plugin cannot support interactive mode: standard input is not a terminal",
            id="always-without-a-terminal",
        ),
        pytest.param(
            {"interactiveMode": None},
            "interactiveMode must be specified",
            id="v1-without-interactive-mode",
        ),
        pytest.param(
            {"interactiveMode": "Sometimes"},
            "invalid interactiveMode 'Sometimes'",
            id="unknown-mode",
        ),
        pytest.param(
            {"apiVersion": "client.authentication.k8s.io/v1alpha1"},
            "invalid apiVersion 'client.authentication.k8s.io/v1alpha1'",
            id="unknown-api-version",
        ),
    ],
)
async def test_exec_stanzas_client_go_refuses(
    tmp_path: Path, stanza: dict[str, Any], error: str
) -> None:
    plugin = install_plugin(tmp_path)
    fields = {k: v for k, v in {**exec_stanza(str(plugin)), **stanza}.items() if v is not None}
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1", fields)
    with pytest.raises(InvalidObjectError, match=error):
        await load_api_client(str(kubeconfig))
    assert not (tmp_path / "seen.json").exists()  # refused before the plugin ran


async def test_provide_cluster_info_hands_the_plugin_the_cluster(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    """With `provideClusterInfo`, KUBERNETES_EXEC_INFO carries the cluster (client-go's
    ConfigToExecCluster), its CA bundle and its exec extension included."""
    plugin = install_plugin(tmp_path)
    (tmp_path / "ca.crt").write_text(CA_PEM, encoding="ascii")
    cluster = {
        "certificate-authority": "ca.crt",
        "tls-server-name": "api.example",
        "extensions": [
            {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "gpudra"}}
        ],
    }
    await list_with_plugin(kube_api, tmp_path, plugin, cluster, provideClusterInfo=True)
    assert exec_info(tmp_path)["spec"]["cluster"] == {
        "server": kube_api.url,
        "tls-server-name": "api.example",
        "certificate-authority-data": base64.b64encode(CA_PEM.encode()).decode(),
        "config": {"audience": "gpudra"},
    }


async def test_without_provide_cluster_info_the_plugin_gets_no_cluster(
    kube_api: FakeKubeApi, tmp_path: Path
) -> None:
    plugin = install_plugin(tmp_path)
    await list_with_plugin(kube_api, tmp_path, plugin)
    assert "cluster" not in exec_info(tmp_path)["spec"]


@pytest.mark.parametrize(
    "static",
    [
        pytest.param({"token": "static"}, id="token"),
        pytest.param({"tokenFile": "static-token"}, id="token-file"),
    ],
)
async def test_a_static_credential_beside_exec_wins(
    kube_api: FakeKubeApi, tmp_path: Path, static: dict[str, Any]
) -> None:
    """client-go's exec authenticator stands aside when the user also has a token, basic auth
    or a client certificate: the plugin never runs, and the static credential is sent."""
    plugin = install_plugin(tmp_path)
    (tmp_path / "static-token").write_text("static", encoding="utf-8")
    path = write_kubeconfig(tmp_path / "kubeconfig", kube_api.url, exec_stanza(str(plugin)))
    config = json.loads(path.read_text(encoding="utf-8"))
    config["users"][0]["user"].update(static)
    path.write_text(json.dumps(config), encoding="utf-8")
    kube_api.accept_tokens("static")
    await list_claims(path)
    assert not (tmp_path / "seen.json").exists()
