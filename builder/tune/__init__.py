"""Trees and draft lengths from a measured cost model (`trtspec tune`).

A speculative setting pays when the tokens one step emits, E[τ], grow faster than what the step costs,
c: the tuner picks the Medusa / EAGLE-1 tree, EAGLE-2's total_nodes (and depth), Lookahead's W, N, G and
the per-batch-size draft schedule (`triton.draft_schedule`) that maximise E[τ] / c.

    curve       `StepCurve`: what a step costs, c(batch, T) for the target and c(batch, F) per EAGLE draft
                call; measured on the build host by the engine stage (CPU: `builder.engines.step_curve`, stored in
                engine.json) or predicted from a roofline of the recipe's GPU (`builder.tune.roofline`)
    acceptance  E[τ] inputs from calibration prompts (the recipe's calibration source, held out from the
                HumanEval bench prompts): per-node acceptance of static trees, τ per EAGLE-2 / Lookahead setting
    expect      E[τ] of a static tree, exactly from per-node acceptance probabilities
    choose      the choosers (each returns the argmax of E[τ] / c over its candidates)
    tuners      `Tuner`: what tune asks of a method (its search, current setting, overlay fields, step cost, host
                model), the object its `Method.tune` names: static (Medusa, EAGLE-1), dynamic (EAGLE-2),
                lookahead, ngram
    overlay     a recipe that `extends:` the tuned one with the picked fields
    run         the `trtspec tune` pipeline: acceptance, cost, choice, measured speedup

Upstream precedent: SafeAILab/EAGLE `eagle/model/ea_model.py` (`EaModel.from_pretrained(total_token=-1)`,
commit 47de7b0e9ef609e93256b95c8226c963e09ae524) times the target at 40…60 tokens and divides by a fixed,
assumed acceptance gain per size; here both factors are measured (acceptance on calibration prompts, the
step curve on this host), and the same ratio picks every method's draft size.
"""
