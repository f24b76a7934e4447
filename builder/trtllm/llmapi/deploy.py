"""`trtspec deploy RECIPE` for `target.backend: trtllm-llmapi`: the served folders, repository and bundle.

    <out>/checkpoint/   model/ (modelopt unified FP8 HF checkpoint + tokenizer) and draft/ (EAGLE-3), hard links
    <out>/repository/   the Triton llmapi repository, model.yaml naming the model as the container sees it
                        (/trtspec/checkpoint/model); model.py is copied from the container at launch
    <out>/bundle/       llm_api_options.yaml, launch.sh (trtllm-serve), launch-triton.sh, docker-run.sh [serve|triton],
                        k8s.yaml, bench.sh (aiperf / perf_analyzer), prompts and tokenizer for them
    <out>/deploy.json   what the bundle is: recipe, stage keys, release, container, next steps
    <out>/README.md     the same steps for a person

Everything up to the checkpoint stage runs here (cached like `trtspec build`); the output is written in a temporary
folder beside <out> and renamed into place only when complete (`builder.trtllm.deploy_folder`, as the engine flow's).
"""

# trtllm: this module is the trtllm-llmapi backend's (builder/trtllm/llmapi)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from builder.files import staged_dir
from builder.trtllm.deploy_folder import link_tree, readme, write_description
from builder.trtllm.llmapi.k8s import MOUNTS


def served_options(loaded, ckpt: Path) -> dict[str, Any]:
    """The LLM options with the folders as the container sees them (MOUNTS)."""
    from builder.recipe.resolve import tree_field
    from builder.trtllm.llmapi.options import llm_options

    r = loaded.recipe
    facts = json.loads((ckpt / "checkpoint.json").read_text(encoding="utf-8"))
    aux = tuple(facts["aux_layers"]) if facts.get("aux_layers") else None
    draft = f"{MOUNTS['checkpoint']}/draft" if (ckpt / "draft").is_dir() else None
    return llm_options(r, draft, aux, loaded.dir_of(tree_field(r)))


def write_deploy(loaded, ckpt: Path, stages: dict[str, str], dest: Path, prompts: list[str] | None) -> dict:
    """Write <dest> from the checkpoint stage's folder `ckpt` (module docstring); returns deploy.json's content."""
    from builder.trtllm.llmapi.bundle import HostPaths, write_bundle
    from builder.trtllm.llmapi.repo import render_repository

    r = loaded.recipe
    dest = Path(dest).absolute()
    with staged_dir(dest) as tmp:
        link_tree(ckpt, tmp / "checkpoint")
        options = served_options(loaded, ckpt)
        model = f"{MOUNTS['checkpoint']}/model"
        repo = render_repository(tmp / "repository", model, options, r.triton.decoupled)
        host = HostPaths(checkpoint=dest / "checkpoint", repository=dest / "repository", tokenizer=ckpt / "model")
        write_bundle(r, tmp / "bundle", host, options, model, prompts)
        info = _info(loaded, stages, repo, options, dest)
        write_description(tmp, info, _readme(loaded, info))
    return info


def _info(loaded, stages: dict[str, str], repo: dict, options: dict, dest: Path) -> dict:
    r = loaded.recipe
    rel = r.trtllm.llmapi
    spec = options.get("speculative_config")
    steps = [
        f"serve: bash {dest}/bundle/docker-run.sh   (trtllm-serve in {r.trtllm.llmapi_image}; OpenAI API on "
        f"{r.triton.bind_address}:{r.triton.ports.http})",
        f"or Triton: bash {dest}/bundle/docker-run.sh triton   (tritonserver with the llmapi repository; needs the "
        "Triton TRT-LLM container)",
        f"or kubectl apply -f {dest}/bundle/k8s.yaml   (fill its PersistentVolumeClaim with checkpoint/, repository/, "
        "bundle/)",
        f"measure: bash {dest}/bundle/bench.sh   (aiperf; TRITON_RUN=1 adds perf_analyzer)",
    ]
    return {
        "recipe": str(loaded.path),
        "backend": "trtllm-llmapi",
        "tensorrt_llm": r.trtllm.version,
        "release": rel.status,
        "container": r.trtllm.llmapi_image,
        "triton_container": rel.triton or r.trtllm.container is not None,
        "device": r.target.device,
        "tp": r.parallelism.tp,
        "pp": r.parallelism.pp,
        "world_size": r.parallelism.tp * r.parallelism.pp,
        "method": r.speculative.method,
        "speculative_config": spec,
        "stages": stages,
        "repository": repo,
        "next_steps": steps,
    }


def _readme(loaded, info: dict) -> str:
    title = (
        f"{loaded.recipe.triton.model_name}: {info['method']} on TensorRT-LLM {info['tensorrt_llm']}'s PyTorch flow "
        f"({info['world_size']} × {info['device']}, tp={info['tp']}, pp={info['pp']})"
    )
    items = [
        "- `checkpoint/model/`: the Hugging Face checkpoint TensorRT-LLM loads (modelopt's unified FP8 format when "
        "the recipe quantizes), with its tokenizer",
        "- `checkpoint/draft/`: the EAGLE-3 draft (config.json with draft_vocab_size and its aux layers)"
        if info["speculative_config"] and info["speculative_config"].get("decoding_type") in ("Eagle", "Eagle3")
        else "- no draft folder (this method has no draft weights)",
        "- `repository/`: the Triton llmapi repository (model.py comes from the container at launch)",
        "- `bundle/`: llm_api_options.yaml, launch.sh, launch-triton.sh, docker-run.sh, k8s.yaml, bench.sh",
    ]
    return readme(title, loaded.path, f"`{info['container']}` ({info['release']})", items, info["next_steps"])
