"""The deployment files kept valid and true: the Kubernetes manifests against Kubernetes' schemas,
compose.yaml through docker-compose's own validation, their grace periods longer than the stop
times they wrap, their environment naming only settings that exist, and the PrometheusRule equal
to docs/prometheus-alerts.yml."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from django.conf import settings

from supervisor.probes import ProbesBeforeHostCheck
from tests.docs.test_docs import known_environment

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
#: The oldest Kubernetes release the manifests are written for (PodDisruptionBudget policy/v1,
#: batch/v1 Jobs with a TTL: 1.23 and later).
KUBERNETES_VERSION = "1.29.0"
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}


def manifests() -> list[tuple[str, dict[str, Any]]]:
    """Every manifest, the opt-in components' included."""
    found = []
    for path in sorted(KUBERNETES.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            found.append((str(path.relative_to(KUBERNETES)), document))
    return found


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in manifests() if doc["kind"] == kind}


@pytest.mark.parametrize(("name", "document"), manifests(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_kubernetes_manifest_is_valid_against_the_kubernetes_schemas(
    name: str, document: dict[str, Any]
) -> None:
    if document["kind"] in OPERATOR_KINDS:
        # The Prometheus Operator's kinds have no schema in Kubernetes' own: their shape is pinned
        # below (the scrape's port, the rules equal to the documented ones).
        assert document["apiVersion"] == "monitoring.coreos.com/v1"
        return
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_the_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    files = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml", "secret.example.yaml"}
    assert set(kustomization["resources"]) == files
    # Monitoring needs the Prometheus Operator's CRDs: a component the default leaves out.
    assert "components" not in kustomization
    component = KUBERNETES / "components" / "monitoring"
    declared = yaml.safe_load((component / "kustomization.yaml").read_text())
    assert declared["kind"] == "Component"
    assert set(declared["resources"]) == {p.name for p in component.glob("*.yaml")} - {"kustomization.yaml"}
    assert {doc["kind"] for name, doc in manifests() if name.startswith("components/")} == OPERATOR_KINDS


def test_the_pods_are_given_longer_than_their_processes_take_to_stop() -> None:
    deployments = by_kind("Deployment")
    cluster = deployments["sas-cluster"]["spec"]["template"]["spec"]
    assert cluster["terminationGracePeriodSeconds"] > settings.SAS_Q_STOP_SECONDS
    web = deployments["sas-web"]["spec"]["template"]["spec"]
    # The preStop pause, then gunicorn's graceful timeout (sas_project/gunicorn_conf.py, 30 s).
    assert web["terminationGracePeriodSeconds"] > 5 + 30


def pod_templates() -> dict[str, dict[str, Any]]:
    return {
        name: doc["spec"]["template"] for kind in ("Deployment", "Job") for name, doc in by_kind(kind).items()
    }


def test_every_pod_runs_without_an_api_token_and_under_the_runtime_seccomp_profile() -> None:
    templates = pod_templates()
    assert set(templates) == {"sas-web", "sas-cluster"}
    for name, template in templates.items():
        spec = template["spec"]
        assert spec["automountServiceAccountToken"] is False, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert spec["securityContext"]["runAsNonRoot"] is True, name


def selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = policy["spec"]["podSelector"].get("matchLabels", {})
    return all(labels.get(key) == value for key, value in wanted.items())


def test_every_pod_denies_the_traffic_its_network_policies_do_not_name() -> None:
    policies = by_kind("NetworkPolicy")
    deny = policies["sas-default-deny"]["spec"]
    assert deny["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in deny and "egress" not in deny
    for name, template in pod_templates().items():
        labels = template["metadata"]["labels"]
        assert selects(policies["sas-default-deny"], labels), name
        own = [
            p for p in policies.values() if p["metadata"]["name"] != "sas-default-deny" and selects(p, labels)
        ]
        assert len(own) == 1, name  # one policy a component, naming what it may reach
    # Only the web tier accepts connections, on its port; the clusters none.
    assert "ingress" not in policies["sas-cluster"]["spec"]
    [web_in] = policies["sas-web"]["spec"]["ingress"]
    assert web_in["ports"] == [{"protocol": "TCP", "port": 8000}]


def test_the_clusters_reach_the_remotes_on_public_addresses_only() -> None:
    egress = by_kind("NetworkPolicy")["sas-cluster"]["spec"]["egress"]
    blocks = [peer["ipBlock"] for rule in egress for peer in rule.get("to", []) if "ipBlock" in peer]
    assert blocks, "the remotes' rule"
    for block in blocks:
        # Private ranges, link-local (the cloud metadata address) and loopback are never allowed.
        assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8"} <= set(
            block.get("except", [])
        ), block


def test_the_probes_use_the_paths_served_before_the_host_check() -> None:
    web = by_kind("Deployment")["sas-web"]["spec"]["template"]["spec"]["containers"][0]
    paths = {web[probe]["httpGet"]["path"] for probe in ("livenessProbe", "readinessProbe", "startupProbe")}
    assert paths <= set(ProbesBeforeHostCheck.VIEWS)
    cluster = by_kind("Deployment")["sas-cluster"]["spec"]["template"]["spec"]["containers"][0]
    # The heartbeat file's age, read by the shell: no Python start every period.
    command = cluster["livenessProbe"]["exec"]["command"]
    assert command[:2] == ["/app/docker/entrypoint", "alive"]
    assert int(command[2]) >= 3 * settings.SAS_CLUSTER_HEARTBEAT_SECONDS
    monitor = by_kind("ServiceMonitor")["sas"]["spec"]["endpoints"][0]
    assert monitor["path"] in ProbesBeforeHostCheck.VIEWS and monitor["port"] == "http"


def test_every_pod_migrates_first_in_an_init_container_as_its_process_is_configured() -> None:
    """No Job to rename per release: each new pod runs `migrate` (one at a time, under the
    migrate command's lock) before its process starts."""
    for name, template in pod_templates().items():
        spec = template["spec"]
        [init] = spec["initContainers"]
        [main] = spec["containers"]
        assert init["args"] == ["migrate"] and init["image"] == main["image"], name
        assert init["envFrom"] == main["envFrom"], name
        assert init["securityContext"] == main["securityContext"], name


def test_the_prometheus_rule_is_the_documented_alert_rules() -> None:
    documented = yaml.safe_load((ROOT / "docs" / "prometheus-alerts.yml").read_text())
    assert by_kind("PrometheusRule")["sas"]["spec"]["groups"] == documented["groups"]


def test_the_deployment_files_name_only_settings_that_exist() -> None:
    configured = set(by_kind("ConfigMap")["sas"]["data"]) | set(by_kind("Secret")["sas"]["stringData"])
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    for service in compose["services"].values():
        configured |= {
            name for name in service.get("environment", {}) if name.startswith(("SAS_", "DJANGO_"))
        }
    assert configured <= known_environment()


def test_compose_yaml_is_valid_for_docker_compose_and_its_stops_are_long_enough() -> None:
    env = {**os.environ, "DJANGO_SECRET_KEY": "k" * 50, "POSTGRES_PASSWORD": "p"}
    result = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "compose.yaml"), "config"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)["services"]
    assert set(resolved) == {"postgres", "redis", "migrate", "web", "cluster-1", "cluster-2"}
    for cluster in ("cluster-1", "cluster-2"):
        assert resolved[cluster]["command"] == ["cluster"]
        assert resolved[cluster]["healthcheck"]["test"][-2:] == ["alive", "60"]
        # Each container's own file: the volume both mount is shared.
        assert resolved[cluster]["environment"]["SAS_CLUSTER_ALIVE_FILE"].startswith("/tmp/")
        seconds = int(resolved[cluster]["stop_grace_period"].rstrip("s"))
        assert seconds > settings.SAS_Q_STOP_SECONDS
    assert resolved["web"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    # Redis (the queues profile) refuses to start without a password and requires it.
    redis = " ".join(resolved["redis"]["command"])
    assert "--requirepass" in redis and "exit 1" in redis
    assert resolved["redis"]["environment"]["REDISCLI_AUTH"] == ""
    # Without the secrets it refuses to start rather than run with empty ones.
    bare = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY", "POSTGRES_PASSWORD")}
    refused = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "compose.yaml"), "config"],
        env=bare,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "POSTGRES_PASSWORD" in refused.stderr


def run_entrypoint(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The image's entry point, with `python` and `gunicorn` stubs that print what they were given."""
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for name in ("python", "gunicorn"):
        stub = stubs / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*"\n')
        stub.chmod(0o755)
    base = {"PATH": f"{stubs}:/usr/bin:/bin"}
    return subprocess.run(
        ["sh", str(ROOT / "docker" / "entrypoint"), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_liveness_probe_reads_the_heartbeat_files_age_without_a_database(tmp_path: Path) -> None:
    file = tmp_path / "cluster-alive"
    missing = run_entrypoint(tmp_path, "alive", "60", SAS_CLUSTER_ALIVE_FILE=str(file))
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    file.touch()
    fresh = run_entrypoint(tmp_path, "alive", "60", SAS_CLUSTER_ALIVE_FILE=str(file))
    assert fresh.returncode == 0 and "cluster alive" in fresh.stdout, fresh.stderr
    old = file.stat().st_mtime - 120
    os.utime(file, (old, old))
    stale = run_entrypoint(tmp_path, "alive", "60", SAS_CLUSTER_ALIVE_FILE=str(file))
    assert stale.returncode == 1 and "more than 60s" in stale.stderr
    # Under SAS_VAR_DIR by default, as the settings place it.
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "cluster-alive").touch()
    assert run_entrypoint(tmp_path, "alive", SAS_VAR_DIR=str(tmp_path / "var")).returncode == 0


@pytest.mark.parametrize("command", ["web", "cluster", "migrate", "manage"])
def test_the_image_refuses_to_start_without_a_database_url_unless_sqlite_is_asked_for(
    tmp_path: Path, command: str
) -> None:
    refused = run_entrypoint(tmp_path, command)
    assert refused.returncode == 2 and "DATABASE_URL is not set" in refused.stderr
    assert refused.stdout == ""  # nothing started
    asked = run_entrypoint(tmp_path, command, SAS_ALLOW_SQLITE="1")
    assert asked.returncode == 0, asked.stderr
    given = run_entrypoint(tmp_path, command, DATABASE_URL="postgres://sas:pw@db:5432/sas")
    assert given.returncode == 0 and given.stdout == asked.stdout
    expected = {
        "web": "gunicorn",
        "cluster": "python manage.py qcluster",
        "migrate": "python manage.py migrate",
    }
    assert given.stdout.startswith(expected.get(command, "python manage.py"))
