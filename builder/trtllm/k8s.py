"""k8s.yaml of the deployment bundle: a Deployment (one pod holding all tp × pp GPUs) and a Service.

Rendered with `yaml.safe_dump_all` from Python data; checked in the tests against the Kubernetes OpenAPI
schemas of the `kubernetes-validate` package (strict: unknown fields are errors).

- The image is the recipe's pinned container (`trtllm.image`: NVIDIA's Triton TRT-LLM image of
  `trtllm.version`); the command is the bundle's `launch.sh` (engine check, then mpirun with one
  tritonserver per rank inside this one pod).
- `resources.limits["nvidia.com/gpu"]` = tp × pp (the NVIDIA device plugin's resource; for extended
  resources the request defaults to the limit).
- Probes on the HTTP port: startupProbe and livenessProbe `GET /v2/health/live`, readinessProbe
  `GET /v2/health/ready` (Triton's KServe v2 health endpoints). tritonserver opens its endpoints only after
  the engines are loaded, so the startup probe allows `STARTUP_S` before liveness takes over.
- Metrics: the port named `metrics` serves Prometheus text at `/metrics`. Scraping uses the pod annotations
  `prometheus.io/scrape`, `prometheus.io/port`, `prometheus.io/path` — the convention of the
  `kubernetes-pods` job in Prometheus' example Kubernetes configuration (documentation/examples/
  prometheus-kubernetes.yml); no ServiceMonitor (that needs the Prometheus Operator's CRDs).
- `/dev/shm` is an `emptyDir` with `medium: Memory` (the python backend's shared memory; docker's
  `--shm-size` has no pod equivalent). The repository, engine and bundle come read-only from one
  PersistentVolumeClaim (`<name>-data`, subPaths repository/, engine/, bundle/) that the
  operator fills with the same folders `docker-run.sh` mounts.
- `strategy: Recreate`: a rolling update would need a second set of GPUs while the old pod still runs.
- Engine lock: launch.sh checks engine.json (versions, GPUs, file sizes) on every start and the files' sha256
  per `VERIFY_HASHES` (env, default `once`; `always` | `never`). The hash stamp goes to `/trtspec/state`, an
  emptyDir: it survives container restarts in the pod (a crash-looping container does not re-hash a 70 GB
  engine each time, ~10-60 s on local NVMe, minutes on a network volume — inside the startup probe's
  `STARTUP_S`), and a new pod hashes once.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from builder.recipe.schema import Recipe
from builder.trtllm.compat import STATE_MOUNT

# Container paths of the served folders (docker-run.sh mounts, k8s subPaths). The repository's tensorrt_llm
# config must name the engine as the server sees it: gpt_model_path = /trtspec/engine.
MOUNTS = {
    "repository": "/trtspec/repository",
    "engine": "/trtspec/engine",
    "bundle": "/trtspec/bundle",
    "checkpoint": "/trtspec/checkpoint",
    "state": STATE_MOUNT,
}
VERIFY_HASHES = "once"  # launch.sh's hash policy in the pod (builder.trtllm.compat: once | always | never)
SHM_SIZE, SHM_LIMIT = "2g", "2Gi"  # the python backend's shared memory (docker --shm-size; pod emptyDir limit)
GPU_RESOURCE = "nvidia.com/gpu"
STARTUP_S = 1800  # engines of a 70B model take minutes to deserialize onto the GPUs
COMPONENT = "tritonserver-trtllm"  # the pod's app.kubernetes.io/component label


def world_size(recipe: Recipe) -> int:
    return recipe.parallelism.tp * recipe.parallelism.pp


def dns_label(prefix: str, recipe: Recipe) -> str:
    """`<prefix>-<triton.model_name>` as a DNS-1123 label: lower case, [a-z0-9-], at most 63 characters."""
    slug = re.sub(r"[^a-z0-9-]+", "-", recipe.triton.model_name.lower()).strip("-") or "model"
    return f"{prefix}-{slug}"[:63].rstrip("-")


def k8s_name(recipe: Recipe) -> str:
    return dns_label("trtspec", recipe)


def labels(name: str, component: str) -> dict[str, str]:
    """A new dict each call: yaml.safe_dump writes a dict met twice as an anchor and an alias."""
    return {
        "app.kubernetes.io/name": "trtspec",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
    }


def http_probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def data_mounts(keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """The served folders, read-only subPaths of the one PersistentVolumeClaim, at their MOUNTS paths."""
    return [{"name": "data", "mountPath": MOUNTS[k], "subPath": k, "readOnly": True} for k in keys]


def container(recipe: Recipe) -> dict[str, Any]:
    p, gpus = recipe.triton.ports, world_size(recipe)
    return {
        "name": "tritonserver",
        "image": recipe.trtllm.image,
        "command": ["bash", f"{MOUNTS['bundle']}/launch.sh"],
        "ports": [
            {"name": "http", "containerPort": p.http, "protocol": "TCP"},
            {"name": "grpc", "containerPort": p.grpc, "protocol": "TCP"},
            {"name": "metrics", "containerPort": p.metrics, "protocol": "TCP"},
        ],
        "env": [{"name": "VERIFY_HASHES", "value": VERIFY_HASHES}],
        "resources": {"limits": {GPU_RESOURCE: gpus}},
        "startupProbe": http_probe("/v2/health/live", 10, STARTUP_S // 10),
        "livenessProbe": http_probe("/v2/health/live", 15, 4),
        "readinessProbe": http_probe("/v2/health/ready", 10, 3),
        "volumeMounts": [
            *data_mounts(("repository", "engine", "bundle")),
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "state", "mountPath": MOUNTS["state"]},
        ],
    }


def deployment(
    name: str,
    component: str,
    annotations: dict[str, str],
    metrics_port: int,
    pod: dict[str, Any],
    claim: str | None,
    volumes: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    """The Deployment (module docstring): one replica, `Recreate`, the pod annotated for Prometheus' scrape on
    `metrics_port`, `pod` its one container; volumes: the data claim (`<name>-data` unless `claim`), the /dev/shm
    emptyDir, then `volumes`."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels(name, component), "annotations": annotations},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
            "template": {
                "metadata": {
                    "labels": labels(name, component),
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(metrics_port),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": {
                    "containers": [pod],
                    "volumes": [
                        {
                            "name": "data",
                            "persistentVolumeClaim": {"claimName": claim or f"{name}-data", "readOnly": True},
                        },
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_LIMIT}},
                        *volumes,
                    ],
                },
            },
        },
    }


def service(name: str, component: str, ports: dict[str, int]) -> dict[str, Any]:
    """A ClusterIP Service publishing the pod's named ports."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels(name, component)},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/instance": name},
            "ports": [{"name": n, "port": port, "targetPort": n, "protocol": "TCP"} for n, port in ports.items()],
        },
    }


def k8s_objects(recipe: Recipe, name: str | None = None, claim: str | None = None) -> list[dict[str, Any]]:
    """[Deployment, Service] for the recipe (name: DNS-1123 label, default from triton.model_name)."""
    name = name or k8s_name(recipe)
    p = recipe.triton.ports
    annotations = {"trtspec/tensorrt-llm": recipe.trtllm.version, "trtspec/world-size": str(world_size(recipe))}
    state = {"name": "state", "emptyDir": {"sizeLimit": "16Mi"}}
    return [
        deployment(name, COMPONENT, annotations, p.metrics, container(recipe), claim, (state,)),
        service(name, COMPONENT, {"http": p.http, "grpc": p.grpc, "metrics": p.metrics}),
    ]


def render_k8s(recipe: Recipe, name: str | None = None, claim: str | None = None) -> str:
    head = (
        f"# {recipe.triton.model_name} on TensorRT-LLM {recipe.trtllm.version}: Deployment + Service, written by trtspec.\n"
        f"# Fill the PersistentVolumeClaim with repository/, engine/ and bundle/ before applying.\n"
    )
    return head + yaml.safe_dump_all(k8s_objects(recipe, name, claim), sort_keys=False)
