"""k8s.yaml of a trtllm-llmapi bundle: a Deployment (one pod, all tp × pp GPUs, trtllm-serve) and a Service.

The same shape as the engine flow's (`builder.trtllm.k8s`: `nvidia.com/gpu` limit, /dev/shm as a memory emptyDir,
`strategy: Recreate`, one PersistentVolumeClaim with the served folders as subPaths), for trtllm-serve's OpenAI
server: one HTTP port; probes `GET /health` (trtllm-serve's health route, `tensorrt_llm/serve/openai_server.py`),
metrics `GET /metrics` on the same port (Prometheus scrape annotations). Rendered with `yaml.safe_dump_all`.
"""

# trtllm: this module is the trtllm-llmapi backend's (builder/trtllm/llmapi)

from __future__ import annotations

import re
from typing import Any

import yaml

from builder.recipe.schema import Recipe

MOUNTS = {
    "checkpoint": "/trtspec/checkpoint",
    "repository": "/trtspec/repository",
    "bundle": "/trtspec/bundle",
}
SHM_SIZE, SHM_LIMIT = "2g", "2Gi"
GPU_RESOURCE = "nvidia.com/gpu"
STARTUP_S = 1800  # a 70B checkpoint takes minutes to load and its CUDA graphs to capture


def world_size(recipe: Recipe) -> int:
    return recipe.parallelism.tp * recipe.parallelism.pp


def k8s_name(recipe: Recipe) -> str:
    """A DNS-1123 label from triton.model_name (lower case, [a-z0-9-], ≤ 63 characters)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", recipe.triton.model_name.lower()).strip("-") or "model"
    return f"trtspec-llmapi-{slug}"[:63].rstrip("-")


def _labels(name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "trtspec",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "trtllm-serve",
    }


def _probe(period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def k8s_objects(recipe: Recipe, name: str | None = None, claim: str | None = None) -> list[dict[str, Any]]:
    name = name or k8s_name(recipe)
    port = recipe.triton.ports.http
    mounts = [
        {"name": "data", "mountPath": MOUNTS[k], "subPath": k, "readOnly": True}
        for k in ("checkpoint", "repository", "bundle")
    ]
    container = {
        "name": "trtllm-serve",
        "image": recipe.trtllm.llmapi_image,
        "command": ["bash", f"{MOUNTS['bundle']}/launch.sh"],
        "env": [{"name": "HTTP_PORT", "value": str(port)}],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "resources": {"limits": {GPU_RESOURCE: world_size(recipe)}},
        "startupProbe": _probe(10, STARTUP_S // 10),
        "livenessProbe": _probe(15, 4),
        "readinessProbe": _probe(10, 3),
        "volumeMounts": [*mounts, {"name": "shm", "mountPath": "/dev/shm"}],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "labels": _labels(name),
            "annotations": {"trtspec/tensorrt-llm": recipe.trtllm.version, "trtspec/flow": "pytorch"},
        },
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/instance": name}},
            "template": {
                "metadata": {
                    "labels": _labels(name),
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(port),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": {
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "data",
                            "persistentVolumeClaim": {"claimName": claim or f"{name}-data", "readOnly": True},
                        },
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": SHM_LIMIT}},
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": _labels(name)},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/instance": name},
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    return [deployment, service]


def render_k8s(recipe: Recipe, name: str | None = None, claim: str | None = None) -> str:
    head = (
        f"# {recipe.triton.model_name} on TensorRT-LLM {recipe.trtllm.version} (PyTorch flow, trtllm-serve): "
        "Deployment + Service, written by trtspec.\n"
        "# Fill the PersistentVolumeClaim with checkpoint/, repository/ and bundle/ before applying.\n"
    )
    return head + yaml.safe_dump_all(k8s_objects(recipe, name, claim), sort_keys=False)
