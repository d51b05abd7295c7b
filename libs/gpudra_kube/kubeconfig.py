"""Kubeconfig files read with client-go's rules (`clientcmd`), handed to kubernetes-asyncio.

kubernetes-asyncio's own loader differs from client-go's where a service notices: it takes the
*last* file's `current-context` from `$KUBECONFIG`, resolves a user's client certificate
against the folder of the file its *cluster* came from, reads `$KUBECONFIG` once at import, and
answers a missing `--kubeconfig` with "Expected key current-context". This module reads the files
itself and gives the library one merged kubeconfig, as client-go's loading rules do:
- an explicit path is one file and must exist; without one, `$KUBECONFIG` (read at each call;
  files separated by `os.pathsep`, missing ones skipped) else `~/.kube/config`;
- the first file to name a cluster, user or context wins, whole (a later entry of the same name
  is ignored, fields it adds included), and the first file to set `current-context` wins;
- relative paths are resolved against the folder of the file that holds them:
  `certificate-authority`, `client-certificate`, `client-key`, `tokenFile`, and an exec
  `command` that contains a slash (a bare name is looked up on `PATH`);
- a file that cannot be read or parsed is an error (client-go's), never skipped;
- a `server` without a scheme (`10.0.0.1:6443`) gets one as client-go's `DefaultServerURL`
  gives it: https:// when the cluster has a CA (file or data) or skips TLS verification, or the
  user has a client certificate, else http://; one with a path but no scheme is refused ("host
  must be a URL or a host:port pair"). kubernetes-asyncio took it as is, and every request
  failed with aiohttp's "NonHttpUrlClientError";
- what the client cannot honour is refused at load, in one line, rather than ignored: a CA
  together with `insecure-skip-tls-verify` (client-go refuses it too), and a `proxy-url` other
  than http or https (client-go also speaks socks5; aiohttp does not), and impersonation
  (`as`, `as-groups`, `as-uid`, `as-user-extra`: kubernetes-asyncio would drop the headers, and
  requests would run as the user itself). `tls-server-name` and http(s) proxies are honoured
  by kubernetes-asyncio;
- an `exec` plugin runs as client-go runs it (`gpudra_kube.exec_plugin`), at load and whenever
  `gpudra_kube.credentials` renews its credential; an `oidc` auth-provider refreshes its token
  as client-go's does (`gpudra_kube.oidc`: the issuer's TLS is verified).
An auth-provider's refreshed token (oidc) is written back to the file its user came from, as
client-go does (kubernetes-asyncio's persister failed with a TypeError instead).
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.dateutil import parse_rfc3339
from kubernetes_asyncio.config.kube_config import FileOrData, KubeConfigLoader

from gpudra_kube import oidc
from gpudra_kube.exec_plugin import ExecPlugin, uses_exec

log = logging.getLogger(__name__)

_SECTIONS = ("clusters", "users", "contexts")
# The fields holding a file name, per section entry (client-go's Get*FileReferences).
_CLUSTER_FILES = ("certificate-authority",)
_USER_FILES = ("client-certificate", "client-key", "tokenFile")
# A user's impersonation fields: kubectl sends them as Impersonate-* headers.
_IMPERSONATION = ("as", "as-groups", "as-uid", "as-user-extra")


def kubeconfig_files(explicit: str | None) -> list[Path]:
    """The files to merge, in precedence order (see the module docstring)."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.exists():
            raise ConfigException(f"kubeconfig {explicit} does not exist")
        return [path]
    listed = os.environ.get("KUBECONFIG", "")
    if listed:
        names = [p for p in listed.split(os.pathsep) if p]
        return [Path(p).expanduser() for p in names if Path(p).expanduser().exists()]
    default = Path.home() / ".kube" / "config"
    return [default] if default.exists() else []


def merge_kubeconfigs(paths: Iterable[Path]) -> tuple[dict[str, Any], dict[str, Path]]:
    """One kubeconfig from `paths` (first wins), every relative path made absolute; and the file
    each user came from (where a refreshed auth-provider token is saved)."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config"}
    for section in _SECTIONS:
        merged[section] = []
    names: dict[str, set[str]] = {section: set() for section in _SECTIONS}
    user_files: dict[str, Path] = {}
    for path in paths:
        config = _read(path)
        base = path.resolve().parent
        for section in _SECTIONS:
            for entry in config.get(section) or []:
                if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                    raise ConfigException(f"kubeconfig {path}: every {section} entry needs a name")
                if entry["name"] in names[section]:
                    continue
                names[section].add(entry["name"])
                merged[section].append(_resolved(section, copy.deepcopy(dict(entry)), base))
                if section == "users":
                    user_files[entry["name"]] = path
        if not merged.get("current-context") and config.get("current-context"):
            merged["current-context"] = config["current-context"]
    return merged, user_files


def _read(path: Path) -> Mapping[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
        config = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigException(f"error loading kubeconfig {path}: {exc}") from exc
    if not isinstance(config, Mapping):
        raise ConfigException(f"kubeconfig {path} is not a YAML mapping")
    return config


def _resolved(section: str, entry: dict[str, Any], base: Path) -> dict[str, Any]:
    def absolute(node: Any, fields: Iterable[str]) -> None:
        if not isinstance(node, dict):
            return
        for field in fields:
            value = node.get(field)
            if isinstance(value, str) and value and not os.path.isabs(value):
                node[field] = os.path.normpath(base / os.path.expanduser(value))

    if section == "clusters":
        absolute(entry.get("cluster"), _CLUSTER_FILES)
    elif section == "users":
        user = entry.get("user")
        absolute(user, _USER_FILES)
        exec_ = user.get("exec") if isinstance(user, dict) else None
        if isinstance(exec_, dict) and "/" in str(exec_.get("command", "")):
            absolute(exec_, ("command",))
    return entry


async def load_kubeconfig(
    path: str | None, context: str | None, configuration: k8s.Configuration
) -> KubeConfigLoader:
    """Fill `configuration` from the kubeconfig (see the module docstring); the loader is
    returned to follow its credentials (`gpudra_kube.credentials`)."""
    files = kubeconfig_files(path)
    if not files:
        raise ConfigException(
            f"no kubeconfig found ($KUBECONFIG={os.environ.get('KUBECONFIG', '')!r}, "
            "~/.kube/config)"
        )
    merged, user_files = merge_kubeconfigs(files)
    if context is None and not merged.get("current-context"):
        raise ConfigException(f"kubeconfig {os.pathsep.join(map(str, files))} sets no context")
    _check_current(merged, context)
    _default_scheme(merged, context)
    # config_base_path "": every path is absolute already, none is re-resolved by the library.
    user = _entry(merged, "contexts", context or merged.get("current-context"), "context").get(
        "user"
    )
    loader = _Loader(
        config_dict=merged,
        active_context=context,
        config_base_path="",
        config_persister=lambda _: _save_auth_provider(merged, user, user_files.get(str(user))),
    )
    await loader.load_and_set(configuration)
    return loader


def _save_auth_provider(merged: Mapping[str, Any], user: Any, path: Path | None) -> None:
    """Write `user`'s auth-provider config (a refreshed oidc token, with its rotated refresh
    token) back into the file the user came from, as client-go's persister does; the rest of
    the file is kept. A file that cannot be written (a read-only Secret mount) is logged: the
    running client has the new token either way."""
    provider = _entry(merged, "users", user, "user").get("auth-provider")
    if path is None or not isinstance(provider, Mapping):
        return
    try:
        config = dict(_read(path))
        for entry in config.get("users") or []:
            stanza = entry.get("user") if isinstance(entry, dict) else None
            if entry.get("name") == user and isinstance(stanza, dict):
                stanza.setdefault("auth-provider", {})["config"] = copy.deepcopy(
                    provider.get("config")
                )
                break
        else:
            return
        temp = path.with_name(f".{path.name}.gpudra-tmp")
        with open(temp, "w", encoding="utf-8") as f:
            yaml.safe_dump(config, f, default_flow_style=False)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temp, path.stat().st_mode & 0o777)  # kubeconfigs are often 0600
        os.replace(temp, path)
    except (OSError, ConfigException) as exc:
        log.warning(
            "could not save the refreshed %s token in %s: %s", provider.get("name"), path, exc
        )


def _entry(merged: Mapping[str, Any], section: str, name: Any, field: str) -> Mapping[str, Any]:
    for entry in merged[section]:
        if entry.get("name") == name and isinstance(entry.get(field), Mapping):
            return dict(entry[field])
    return {}


def _check_current(merged: Mapping[str, Any], context: str | None) -> None:
    """Refuse the current context's settings that this client cannot honour; what is missing
    is left to the library to name."""
    current = _entry(merged, "contexts", context or merged.get("current-context"), "context")
    user = _entry(merged, "users", current.get("user"), "user")
    asked = [key for key in _IMPERSONATION if user.get(key)]
    if asked:
        raise ConfigException(
            f"user {current.get('user')}: impersonation ({', '.join(asked)}) is not supported "
            "by this client; give the impersonated identity its own credentials"
        )
    cluster_name = current.get("cluster")
    cluster = _entry(merged, "clusters", cluster_name, "cluster")
    has_ca = cluster.get("certificate-authority") or cluster.get("certificate-authority-data")
    if cluster.get("insecure-skip-tls-verify") and has_ca:
        raise ConfigException(
            f"cluster {cluster_name}: a certificate authority with insecure-skip-tls-verify is "
            "not allowed (client-go refuses it too): drop one of them"
        )
    proxy = cluster.get("proxy-url")
    if proxy and urlsplit(str(proxy)).scheme not in ("http", "https"):
        raise ConfigException(
            f"cluster {cluster_name}: proxy-url {proxy} is not supported: this client speaks to "
            "http and https proxies only"
        )


def _default_scheme(merged: Mapping[str, Any], context: str | None) -> None:
    """Give the current context's server a scheme if it has none, in place (client-go's
    `rest.DefaultServerUrlFor` and `DefaultServerURL`)."""
    current = _entry(merged, "contexts", context or merged.get("current-context"), "context")
    user = _entry(merged, "users", current.get("user"), "user")
    for entry in merged["clusters"]:
        cluster = entry.get("cluster")
        if entry.get("name") != current.get("cluster") or not isinstance(cluster, dict):
            continue
        server = cluster.get("server")
        if not isinstance(server, str) or not server:
            return  # missing: left to the library to name
        tls = any(
            cluster.get(key) for key in ("certificate-authority", "certificate-authority-data")
        ) or bool(cluster.get("insecure-skip-tls-verify"))
        tls = tls or any(user.get(key) for key in ("client-certificate", "client-certificate-data"))
        cluster["server"] = _server_url(str(entry["name"]), server, tls)
        return


def _server_url(cluster: str, server: str, tls: bool) -> str:
    """`server` with a scheme: its own, else https:// when `tls`, else http://."""
    why = f"cluster {cluster}: server {server!r}: host must be a URL or a host:port pair"
    try:
        parts = urlsplit(server)
        if parts.scheme and parts.netloc:
            return server
        url = ("https://" if tls else "http://") + server
        parts = urlsplit(url)
    except ValueError as exc:  # a malformed IPv6 literal, ...
        raise ConfigException(f"{why}: {exc}") from exc
    if not parts.netloc or parts.path not in ("", "/"):
        raise ConfigException(why)
    return url


class _Loader(KubeConfigLoader):
    """The library's loader with client-go's exec plugin runner and oidc refresh."""

    async def _refresh_oidc(self, provider: Any) -> None:
        # Replaces the library's refresh (see gpudra_kube.oidc); called by its
        # `_load_oid_token` when the id-token is missing or expires within 5 minutes.
        config = provider["config"].value
        id_token, rotated = await oidc.refresh(config)
        config["id-token"] = id_token
        if rotated:
            config["refresh-token"] = rotated
        persist = getattr(self, "_config_persister", None)
        if persist is not None:
            persist(None)

    async def load_from_exec_plugin(self) -> bool:
        """Run the plugin now (callers decide when: at load, or to renew) and take its
        credential whole, as client-go does: a token, a client certificate and key, or both,
        with its expiry if it has one; what the answer lacks is dropped (`token` deleted,
        `cert_file` and `key_file` None), never kept from an earlier answer."""
        user, cluster = getattr(self, "_user", None), getattr(self, "_cluster", None)
        if user is None or cluster is None or not uses_exec(user.value):
            return False  # the library goes on to the token, basic auth or certificate
        plugin = ExecPlugin.from_kubeconfig(user["exec"].value, cluster.value)
        status = await plugin.run()
        if status.get("expirationTimestamp"):
            self.exec_plugin_expiry = parse_rfc3339(status["expirationTimestamp"])
        elif hasattr(self, "exec_plugin_expiry"):
            del self.exec_plugin_expiry  # this credential lasts until a 401
        if status.get("token"):
            self.token = f"Bearer {status['token']}"
        elif hasattr(self, "token"):
            del self.token  # the library sends any `token` attribute it finds
        if not status.get("clientCertificateData"):
            for attribute in ("cert_file", "key_file"):
                setattr(self, attribute, None)  # kept (None) so the library loads no other
            return True
        # A certificate and key (the runner checked there are both), as the library takes them:
        # files (one per content) the TLS context is built from; a renewal that brings a new
        # pair has the client build a new one (gpudra_kube.credentials).
        for attribute, key in (
            ("cert_file", "clientCertificateData"),
            ("key_file", "clientKeyData"),
        ):
            setattr(
                self,
                attribute,
                FileOrData(
                    status,
                    None,
                    data_key_name=key,
                    base64_file_content=False,
                    temp_file_path=getattr(self, "_temp_file_path", None),
                ).as_file(),
            )
        return True
