"""`trtspec deploy RECIPE`: the TensorRT-LLM deployment bundle of a `target.backend: trtllm` recipe.

    <out>/checkpoint/   the TensorRT-LLM checkpoint (config.json, rank{N}.safetensors; hard links into the cache)
    <out>/engine/       the engine, when this host built it (trtspec build on a GPU host); else bundle/build.sh makes it
    <out>/repository/   the inflight_batcher_llm repository; gpt_model_path = --engine-path (default /trtspec/engine,
                        where docker-run.sh and k8s.yaml mount <out>/engine)
    <out>/bundle/       build.sh + build.json (the exact trtllm-build, then the engine lock engine.json),
                        launch.sh (engine check + mpirun), docker-run.sh ([serve] | build), k8s.yaml,
                        bench.sh (perf_analyzer / genai-perf), check_engine.py (the lock's stdlib code), prompts
    <out>/deploy.json   what the bundle is: recipe, stage keys, versions, container, next steps
    <out>/README.md     the same steps for a person

Everything up to the checkpoint runs on this machine (cached like `trtspec build`); the bundle is written in
a temporary folder beside <out> and renamed into place only when complete (`builder.trtllm.deploy_folder`, shared
with the trtllm-llmapi flow's `builder.trtllm.llmapi.deploy`).
"""

# trtllm: `trtspec deploy` is the trtllm backend's own command (its checkpoint, repository and bundle)

from __future__ import annotations

import json
from pathlib import Path

import click

from builder.commands.options import echo_warnings, load_checked, set_option
from builder.errors import UserError


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@set_option
@click.option(
    "--out", "-o", type=click.Path(file_okay=False), help="Bundle folder (default: out/deploy/<recipe name>)."
)
@click.option(
    "--cache-dir",
    default=".trtspec-cache",
    show_default=True,
    type=click.Path(file_okay=False),
    help="The build cache (stages up to the checkpoint are built or reused there).",
)
@click.option(
    "--engine-path",
    default=None,
    metavar="PATH",
    help="The engine folder as the server sees it (gpt_model_path); default /trtspec/engine, where "
    "docker-run.sh and k8s.yaml mount <out>/engine.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
def deploy(
    recipe: str, overrides: tuple[str, ...], out: str | None, cache_dir: str, engine_path: str | None, quiet: bool
) -> None:
    """Write the TensorRT-LLM deployment bundle of RECIPE (target.backend: trtllm).

    \b
    The checkpoint is converted here (CPU); the engine is built by bundle/build.sh inside the pinned
    container on a GPU host (or taken from the cache when this host built it), served by bundle/launch.sh
    (docker-run.sh, k8s.yaml) and measured by bundle/bench.sh.
    """
    from builder.commands.build_cmds import BuildDisplay
    from builder.stages.runner import build as run_build

    loaded, findings = load_checked(recipe, overrides)
    echo_warnings(findings, loaded)
    r = loaded.recipe
    if r.target.engine_backend not in ("trtllm", "trtllm-llmapi"):
        raise UserError(
            f"deploy writes TensorRT-LLM bundles; this recipe's backend is {r.target.engine_backend} "
            "(serve it with `trtspec serve`)",
            field="target.backend",
            allowed="trtllm, trtllm-llmapi",
        )
    result = run_build(loaded, cache_dir, until="checkpoint", report=BuildDisplay(quiet))
    dest = Path(out) if out else Path("out/deploy") / Path(recipe).stem
    if r.target.engine_backend == "trtllm-llmapi":  # the PyTorch flow: no engine (builder.trtllm.llmapi.deploy)
        from builder.trtllm.llmapi.deploy import write_deploy

        runs = {run.name: run.key for run in result.runs}
        info = write_deploy(loaded, result.folder("checkpoint"), runs, dest, _prompts(loaded))
        what = f"TensorRT-LLM {info['tensorrt_llm']} PyTorch flow"
    else:
        info = _write(loaded, result, Path(cache_dir), dest, engine_path)
        todo = "to build: bash " + str(dest / "bundle/docker-run.sh") + " build"
        what = f"engine {'included' if info['engine_included'] else todo}"
    click.echo(f"deploy bundle: {dest}  ({what})")
    for step in info["next_steps"]:
        click.echo(f"  {step}")


def _engine_folder(loaded, cache_dir: Path) -> Path | None:
    """The engine stage's output when this host built it (a cache hit), else None."""
    from builder.stages.keys import plan_stages
    from builder.stages.store import Store

    stage = next(s for s in plan_stages(loaded) if s.name == "engine")
    store = Store(cache_dir)
    return store.dir("engine", stage.key) if store.hit("engine", stage.key) is not None else None


def _write(loaded, result, cache_dir: Path, dest: Path, engine_path: str | None) -> dict:
    from builder.files import link_or_copy, staged_dir
    from builder.recipe.resolve import tree_field
    from builder.stages.load import SOURCE
    from builder.trtllm.build_cmd import build_command, write_build_script
    from builder.trtllm.bundle import HostPaths, write_bundle
    from builder.trtllm.deploy_folder import link_tree, write_description
    from builder.trtllm.k8s import MOUNTS
    from builder.trtllm.repo_settings import repo_settings
    from triton_repo.trtllm.render import render_repository

    r = loaded.recipe
    source = json.loads((result.folder("load") / SOURCE).read_text(encoding="utf-8"))
    ckpt, engine = result.folder("checkpoint"), _engine_folder(loaded, cache_dir)
    dest = dest.absolute()
    with staged_dir(dest) as tmp:
        for f in sorted(ckpt.iterdir()):  # its files only (the engine flow's checkpoint has no subfolders to serve)
            if f.is_file():
                link_or_copy(f, tmp / "checkpoint" / f.name)
        if engine is not None:
            link_tree(engine, tmp / "engine")
        settings = repo_settings(loaded, engine_dir=engine_path or MOUNTS["engine"])
        repo = render_repository(tmp / "repository", settings, Path(source["tokenizer"]))
        host = HostPaths(
            repository=dest / "repository",
            engine=dest / "engine",
            checkpoint=dest / "checkpoint",
            tokenizer=tmp / "repository" / settings.tokenizer_dir,
        )
        write_bundle(r, tmp / "bundle", host, prompts=_prompts(loaded), ensemble=settings.model_name)
        cmd = build_command(r, "$HERE/../checkpoint", "$HERE/../engine", tree_dir=loaded.dir_of(tree_field(r)))
        write_build_script(cmd, tmp / "bundle")
        info = _info(loaded, result, engine is not None, repo, cmd, dest)
        write_description(tmp, info, _readme(loaded, info))
    return info


def _prompts(loaded) -> list[str]:
    """bench.sh's prompts: the recipe's bench.prompt_source texts (the same ones `trtspec bench` sends)."""
    from builder.bench.serve_bench import source_texts

    texts = source_texts(loaded.recipe.bench.prompt_source, loaded.dir_of(("bench", "prompt_source")))
    return texts[:64]


def _info(loaded, result, engine_included: bool, repo: dict, cmd, dest: Path) -> dict:
    r = loaded.recipe
    world = r.parallelism.tp * r.parallelism.pp
    steps = (
        []
        if engine_included
        else [
            f"build, on the GPU host: bash {dest}/bundle/docker-run.sh build   (runs bundle/build.sh in {r.trtllm.image}: "
            f"trtllm-build, then the engine lock {dest}/engine/engine.json)"
        ]
    )
    steps += [
        f"serve: bash {dest}/bundle/docker-run.sh   (or kubectl apply -f {dest}/bundle/k8s.yaml; inside the "
        "container: bash bundle/launch.sh; it checks engine.json first, file hashes once per host: "
        "VERIFY_HASHES=once|always|never)",
        f"measure: bash {dest}/bundle/bench.sh",
    ]
    return {
        "recipe": str(loaded.path),
        "backend": "trtllm",
        "tensorrt_llm": r.trtllm.version,
        "tensorrt": r.trtllm.release.tensorrt,
        "container": r.trtllm.image,
        "device": r.target.device,
        "tp": r.parallelism.tp,
        "pp": r.parallelism.pp,
        "world_size": world,
        "method": r.speculative.method,
        "stages": {run.name: run.key for run in result.runs},
        "engine_included": engine_included,
        "ensemble": repo["ensemble"],
        "decoding_mode": repo["decoding_mode"],
        "build": cmd.manifest(),
        "next_steps": steps,
    }


def _readme(loaded, info: dict) -> str:
    from builder.trtllm.deploy_folder import readme

    r = loaded.recipe
    title = (
        f"{info['ensemble']}: {r.speculative.method} on TensorRT-LLM {info['tensorrt_llm']} "
        f"({info['world_size']} × {r.target.device}, tp={info['tp']}, pp={info['pp']})"
    )
    items = [
        "- `checkpoint/`: the TensorRT-LLM checkpoint (config.json, rank{N}.safetensors)",
        "- `engine/`: "
        + (
            "the engine built on this host, with its lock engine.json"
            if info["engine_included"]
            else "written by `bundle/build.sh` (trtllm-build, each flag's recipe field commented, then the "
            "lock engine.json: versions, GPU, every file's sha256); `bundle/docker-run.sh build` runs "
            "it in the pinned container"
        ),
        "- `repository/`: the inflight_batcher_llm model repository (gpt_model_path = the engine as the server sees it)",
        "- `bundle/`: launch.sh (engine lock check, then mpirun with one tritonserver per rank), docker-run.sh "
        "(`build` or serve; launch.sh's and build.sh's settings set in the environment are passed in), k8s.yaml, "
        "bench.sh",
    ]
    container = f"`{info['container']}` (TensorRT {info['tensorrt']})"
    return readme(title, loaded.path, container, items, info["next_steps"])
