"""A kubeconfig `exec` credential plugin, run as client-go runs it (`plugin/pkg/client/auth/exec`).

kubernetes-asyncio's runner differs from client-go's where a service notices: it swallows the
plugin's stderr unless the plugin fails, hands the plugin our stdin, derives `interactive` from
stdout, ignores `interactiveMode`, `provideClusterInfo` and `installHint`, and reports a missing
executable as a bare `FileNotFoundError`. Here, as in client-go:
- `apiVersion` is client.authentication.k8s.io/v1 or v1beta1, and the plugin must answer in it;
  v1 requires `interactiveMode` (v1beta1 defaults to IfAvailable). `Never`: not interactive;
  `IfAvailable`: interactive when our stdin is a terminal; `Always`: refused, with a clear error,
  unless stdin is a terminal. Only an interactive plugin gets our stdin (else /dev/null);
- `KUBERNETES_EXEC_INFO` holds the ExecCredential request (`spec.interactive`, and with
  `provideClusterInfo` the cluster: server, tls-server-name, insecure-skip-tls-verify, the CA
  bundle, proxy-url, disable-compression and the cluster's `client.authentication.k8s.io/exec`
  extension as `config`); `env` entries are added to our environment;
- the plugin's stderr passes through to ours as it comes (it is where plugins warn and prompt);
  its last line is also kept for the error when the plugin fails;
- a missing executable names it and adds the `installHint`; a failed run names the executable
  and its exit code; the answer must be an ExecCredential with a token or a certificate and
  key (both, or neither);
- unlike client-go, which waits for ever, a run that is not interactive is bounded
  (`RUN_TIMEOUT`): a plugin that has not answered by then is killed, with whatever it started
  (it runs in a process group of its own), and the run fails naming the executable. An
  interactive run (a person logging in at a terminal) is not bounded;
- a user that also has a token, `tokenFile`, basic auth or a client certificate uses that and
  never runs the plugin (`uses_exec`).
The command is run as given: a relative path with a slash was made absolute against the
kubeconfig's folder when the file was read (`gpudra_kube.kubeconfig`). Not supported: plugin
policies (client-go's allowlist), which fail loudly rather than being ignored.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.config.config_exception import ConfigException

API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
CLUSTER_EXTENSION = "client.authentication.k8s.io/exec"
INTERACTIVE_MODES = ("Never", "IfAvailable", "Always")
# A user with any of these does not use its exec plugin (client-go's exec authenticator stands
# aside for a token, basic auth or a client certificate).
STATIC_CREDENTIALS = (
    "token",
    "tokenFile",
    "username",
    "password",
    "client-certificate",
    "client-certificate-data",
)
# Seconds a plugin that is not interactive may take to answer. A plugin answers from a cache or
# after one call to its identity service: about a second (`aws eks get-token`, GKE's
# gke-gcloud-auth-plugin, kubelogin with a refresh token); 30 s is that many times over, and
# matches `ApiStore`'s request timeout, so that a request waits for its credential no longer
# than for the API server. The kubeconfig has no field for it (nor has client-go a bound);
# the Kubernetes client has no settings of its own (services pass only the kubeconfig path).
RUN_TIMEOUT = 30.0
INSTALL_HELP = (
    "It looks like you are trying to use a client-go credential plugin that is not installed; see "
    "https://kubernetes.io/docs/reference/access-authn-authz/authentication/"
    "#client-go-credential-plugins"
)


def uses_exec(user: Mapping[str, Any]) -> bool:
    """Whether a kubeconfig user authenticates with its exec plugin."""
    return "exec" in user and not any(user.get(key) for key in STATIC_CREDENTIALS)


class ExecPluginError(ConfigException):
    """The plugin is misconfigured, could not run, or answered something unusable."""


@dataclass(frozen=True)
class ExecPlugin:
    """One user's `exec` stanza, checked; `cluster`: the ExecCredential's `spec.cluster` when
    the stanza asks for `provideClusterInfo`, else None."""

    api_version: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    interactive_mode: str = "IfAvailable"
    install_hint: str = ""
    cluster: Mapping[str, Any] | None = field(default=None)

    @classmethod
    def from_kubeconfig(cls, stanza: Mapping[str, Any], cluster: Mapping[str, Any]) -> ExecPlugin:
        api_version = stanza.get("apiVersion")
        if api_version not in API_VERSIONS:
            raise ExecPluginError(f"exec plugin: invalid apiVersion {api_version!r}")
        command = stanza.get("command")
        if not isinstance(command, str) or not command:
            raise ExecPluginError("exec plugin: command must be specified")
        mode = stanza.get("interactiveMode") or ""
        if not mode:
            if api_version.endswith("/v1"):
                raise ExecPluginError("exec plugin: interactiveMode must be specified for v1")
            mode = "IfAvailable"
        if mode not in INTERACTIVE_MODES:
            raise ExecPluginError(f"exec plugin: invalid interactiveMode {mode!r}")
        if stanza.get("pluginPolicy"):
            raise ExecPluginError("exec plugin: pluginPolicy is not supported by this client")
        args = stanza.get("args") or []
        if not isinstance(args, list):
            raise ExecPluginError(f"exec plugin: args must be a list, not {args!r}")
        env: list[tuple[str, str]] = []
        for item in stanza.get("env") or []:
            if not isinstance(item, Mapping) or not item.get("name"):
                raise ExecPluginError("exec plugin: every env entry needs a name")
            env.append((str(item["name"]), str(item.get("value", ""))))
        return cls(
            api_version=api_version,
            command=command,
            args=tuple(str(a) for a in args),
            env=tuple(env),
            interactive_mode=mode,
            install_hint=str(stanza.get("installHint") or ""),
            cluster=_cluster_info(cluster) if stanza.get("provideClusterInfo") else None,
        )

    def interactive(self) -> bool:
        """Whether this run may talk to the user (client-go's `isInteractive`)."""
        # File descriptor 0, the stdin an interactive plugin inherits (client-go: os.Stdin).
        terminal = os.isatty(0)
        if self.interactive_mode == "Always" and not terminal:
            raise ExecPluginError(
                "exec plugin cannot support interactive mode: standard input is not a terminal"
            )
        return self.interactive_mode != "Never" and terminal

    def request(self, interactive: bool) -> dict[str, Any]:
        """The ExecCredential the plugin reads from `KUBERNETES_EXEC_INFO`."""
        spec: dict[str, Any] = {"interactive": interactive}
        if self.cluster is not None:
            spec["cluster"] = dict(self.cluster)
        return {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}

    async def run(self) -> Mapping[str, Any]:
        """Run the plugin once; its ExecCredential's `status`."""
        interactive = self.interactive()
        env = dict(os.environ)
        env.update(self.env)
        env["KUBERNETES_EXEC_INFO"] = json.dumps(self.request(interactive))
        # Read when the run starts, so that a test (or an embedding program) may change it.
        timeout = None if interactive else RUN_TIMEOUT
        try:
            proc = await asyncio.create_subprocess_exec(
                self.command,
                *self.args,
                env=env,
                stdin=None if interactive else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                # Not interactive: a group of its own, so that ending it ends what it started
                # (an interactive plugin stays in the terminal's foreground group to read it).
                process_group=None if interactive else 0,
            )
        except FileNotFoundError as exc:
            hint = f"; {self.install_hint.strip()}" if self.install_hint.strip() else ""
            raise ExecPluginError(
                f"exec: executable {self.command} not found{hint} ({INSTALL_HELP})"
            ) from exc
        except OSError as exc:  # not executable, ...
            raise ExecPluginError(f"exec: {self.command}: {exc}") from exc
        assert proc.stdout is not None
        assert proc.stderr is not None
        try:
            async with asyncio.timeout(timeout):
                stdout, last_error = await asyncio.gather(
                    proc.stdout.read(), _pass_through(proc.stderr)
                )
                code = await proc.wait()
        except TimeoutError:
            _kill(proc, interactive)
            await proc.wait()
            raise ExecPluginError(
                f"exec: executable {self.command} did not answer within {timeout:g} s; "
                "it was stopped"
            ) from None
        except BaseException:  # cancelled (the caller gave up): the plugin is not left running
            _kill(proc, interactive)
            # Nor left to be reaped by a loop that may close next (a service's at shutdown, a
            # test's): its exit would reach a closed loop and its transport raise from `__del__`.
            # It was killed: this wait is as short as its exit.
            await proc.wait()
            raise
        if code != 0:
            why = f": {last_error}" if last_error else ""
            raise ExecPluginError(
                f"exec: executable {self.command} failed with exit code {code}{why}"
            )
        return self._status(stdout)

    def _status(self, stdout: bytes) -> Mapping[str, Any]:
        try:
            answer = json.loads(stdout)
        except ValueError as exc:
            raise ExecPluginError(f"exec: decoding the plugin's output: {exc}") from exc
        if not isinstance(answer, Mapping) or answer.get("kind") != "ExecCredential":
            raise ExecPluginError("exec: the plugin's output is not an ExecCredential")
        if answer.get("apiVersion") != self.api_version:
            raise ExecPluginError(
                f"exec plugin is configured to use API version {self.api_version}, plugin "
                f"returned version {answer.get('apiVersion')}"
            )
        status = answer.get("status")
        if not isinstance(status, Mapping):
            raise ExecPluginError("exec plugin didn't return a status field")
        token = status.get("token")
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if not token and not cert and not key:
            raise ExecPluginError("exec plugin didn't return a token or cert/key pair")
        if bool(cert) != bool(key):
            raise ExecPluginError("exec plugin returned only certificate or key, not both")
        return status


def _kill(proc: asyncio.subprocess.Process, interactive: bool) -> None:
    """End the plugin; one that is not interactive with its process group."""
    with contextlib.suppress(ProcessLookupError):
        if interactive:
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL)


async def _pass_through(stream: asyncio.StreamReader) -> str:
    """Copy the plugin's stderr to ours as it comes; its last non-empty line."""
    last = ""
    while chunk := await stream.read(4096):
        sys.stderr.write(chunk.decode(errors="replace"))
        sys.stderr.flush()
        lines = [line for line in chunk.decode(errors="replace").splitlines() if line.strip()]
        if lines:
            last = lines[-1].strip()
    return last


def _cluster_info(cluster: Mapping[str, Any]) -> dict[str, Any]:
    """client-go's `ConfigToExecCluster` from a kubeconfig cluster stanza."""
    info: dict[str, Any] = {"server": str(cluster.get("server", ""))}
    for key in ("tls-server-name", "proxy-url"):
        if cluster.get(key):
            info[key] = str(cluster[key])
    for key in ("insecure-skip-tls-verify", "disable-compression"):
        if cluster.get(key):
            info[key] = True
    ca = cluster.get("certificate-authority-data")
    if not ca and cluster.get("certificate-authority"):
        try:
            with open(str(cluster["certificate-authority"]), "rb") as f:
                ca = base64.standard_b64encode(f.read()).decode("ascii")
        except OSError as exc:
            raise ExecPluginError(
                f"exec plugin: cannot read the cluster's CA bundle: {exc}"
            ) from exc
    if ca:
        info["certificate-authority-data"] = str(ca)
    for extension in cluster.get("extensions") or []:
        if isinstance(extension, Mapping) and extension.get("name") == CLUSTER_EXTENSION:
            info["config"] = extension.get("extension")
    return info
