"""k8s.yaml of a trtllm-llmapi bundle: a Deployment (one pod, all tp × pp GPUs, trtllm-serve) and a Service.

The same shape as the engine flow's, built by its `deployment` and `service` (`builder.trtllm.k8s`: `nvidia.com/gpu`
limit, /dev/shm as a memory emptyDir, `strategy: Recreate`, one PersistentVolumeClaim with the served folders as
subPaths), for trtllm-serve's OpenAI server: one HTTP port; probes `GET /health` (trtllm-serve's health route,
`tensorrt_llm/serve/openai_server.py`), metrics `GET /metrics` on the same port (Prometheus scrape annotations).
Rendered with `yaml.safe_dump_all`.
"""

# trtllm: this module is the trtllm-llmapi backend's (builder/trtllm/llmapi)

from __future__ import annotations

from typing import Any

import yaml

from builder.recipe.schema import Recipe
from builder.trtllm import k8s as engine_k8s
from builder.trtllm.k8s import (
    GPU_RESOURCE,
    STARTUP_S,
    data_mounts,
    deployment,
    dns_label,
    http_probe,
    service,
    world_size,
)

MOUNTS = {k: engine_k8s.MOUNTS[k] for k in ("checkpoint", "repository", "bundle")}  # the engine flow's paths
COMPONENT = "trtllm-serve"  # the pod's app.kubernetes.io/component label


def k8s_name(recipe: Recipe) -> str:
    return dns_label("trtspec-llmapi", recipe)


def k8s_objects(recipe: Recipe, name: str | None = None, claim: str | None = None) -> list[dict[str, Any]]:
    """[Deployment, Service]: trtllm-serve's one HTTP port serves the API, /health and /metrics."""
    name = name or k8s_name(recipe)
    port = recipe.triton.ports.http
    container = {
        "name": "trtllm-serve",
        "image": recipe.trtllm.llmapi_image,
        "command": ["bash", f"{MOUNTS['bundle']}/launch.sh"],
        "env": [{"name": "HTTP_PORT", "value": str(port)}],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "resources": {"limits": {GPU_RESOURCE: world_size(recipe)}},
        "startupProbe": http_probe("/health", 10, STARTUP_S // 10),
        "livenessProbe": http_probe("/health", 15, 4),
        "readinessProbe": http_probe("/health", 10, 3),
        "volumeMounts": [
            *data_mounts(("checkpoint", "repository", "bundle")),
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    annotations = {"trtspec/tensorrt-llm": recipe.trtllm.version, "trtspec/flow": "pytorch"}
    return [
        deployment(name, COMPONENT, annotations, port, container, claim),
        service(name, COMPONENT, {"http": port}),
    ]


def render_k8s(recipe: Recipe, name: str | None = None, claim: str | None = None) -> str:
    head = (
        f"# {recipe.triton.model_name} on TensorRT-LLM {recipe.trtllm.version} (PyTorch flow, trtllm-serve): "
        "Deployment + Service, written by trtspec.\n"
        "# Fill the PersistentVolumeClaim with checkpoint/, repository/ and bundle/ before applying.\n"
    )
    return head + yaml.safe_dump_all(k8s_objects(recipe, name, claim), sort_keys=False)
