"""Which methods TensorRT-LLM 1.2's engine flow serves, and how: each method's `Method.trtllm.engine`.

An `EngineFlow` says how trtllm-build, the checkpoint and the Triton C++ backend take the method (build and
decoding modes, the checkpoint's architecture and draft, the repository parameter); a `NotServed` carries upstream's
reason, which every entry point of this backend (recipe validation first, `builder.recipe.trtllm_checks`; then the
checkpoint converter, the build command, the repository settings) says to the user as is. No method name is
compared here: a method installed by another package is served exactly when its `Method` says so.
"""

from __future__ import annotations

from builder.errors import UserError
from builder.speculative import registry
from builder.speculative.method import EngineFlow, NotServed

METHOD_FIELD = "speculative.method"


def served() -> tuple[str, ...]:
    """The methods the engine flow serves, in registry order (the `allowed` of a refusal)."""
    return tuple(name for name, m in registry.methods().items() if isinstance(m.trtllm.engine, EngineFlow))


def engine_flow(name: str, unknown_field: str = METHOD_FIELD) -> EngineFlow:
    """The engine flow of method `name`. UserError: an unknown name (field `unknown_field`: the caller's own field
    for it), or a method this line does not serve (its `NotServed` reason, field speculative.method)."""
    m = registry.methods().get(name)
    if m is None:
        raise UserError(f"unknown method {name!r}", field=unknown_field, allowed=", ".join(served()))
    flow = m.trtllm.engine
    if isinstance(flow, NotServed):
        raise UserError(flow.reason, field=METHOD_FIELD, allowed=", ".join(served()))
    return flow
