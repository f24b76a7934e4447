"""The speculative methods trtspec knows: the built-in ones and those installed packages register.

    methods()            {name: Method}, built in first (none, medusa, eagle, eagle3, lookahead, ngram), then the
                         third-party ones by name
    get(name)            one method (UserError naming the known ones otherwise)
    of(config)           the method of a config (a recipe's `speculative` section)
    drafter_config(data) a drafter config (engine.json's "drafter", a `--method` override) validated by its method
    facts(config)        `Method.facts` of a resolved config

Built-in methods are imported here by name, so a source checkout, the project's editable install and the runtime
copy a Triton repository carries (`triton_repo.runtime`, which has no trtspec distribution metadata) all find them
without an install step. A method in another installed package registers under the entry-point group GROUP:

    [project.entry-points."trtspec.methods"]
    repeat = "my_package.method:METHOD"      # the entry point's name is the method's name

Discovery runs once per process (the recipe schema's union is built from it at import). An entry point that fails
to import, names something that is not a `Method`, or whose name is not its method's is refused with a
`MethodError` naming the distribution; so is a second method of a name already taken. The repository's runtime
copies a registered third-party method's package and a minimal `.dist-info` naming its entry point
(`triton_repo.runtime`), so the served copy discovers it the same way.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from builder.errors import UserError
from builder.speculative.eagle.method import METHOD as EAGLE
from builder.speculative.eagle3.method import METHOD as EAGLE3
from builder.speculative.lookahead.method import METHOD as LOOKAHEAD
from builder.speculative.medusa.method import METHOD as MEDUSA
from builder.speculative.method import Config, Facts, Method
from builder.speculative.ngram.method import METHOD as NGRAM
from builder.speculative.none.method import METHOD as NONE

GROUP = "trtspec.methods"
BUILTIN = (NONE, MEDUSA, EAGLE, EAGLE3, LOOKAHEAD, NGRAM)  # the recipe schema's union keeps this order


class MethodError(UserError):
    """An installed method that cannot be used (it fails to import, is no `Method`, or its name is taken)."""


@dataclass(frozen=True)
class ThirdParty:
    """A method registered by another installed distribution (the runtime copy and the stage keys carry its code)."""

    method: Method
    distribution: str
    version: str
    entry_point: str  # "module:NAME", as registered
    package: str  # the top-level package (or module) holding it
    root: Path  # the folder that holds `package` (a sys.path entry)


_FOUND: tuple[dict[str, Method], list[ThirdParty]] | None = None


def _where(third: ThirdParty | None) -> str:
    return "trtspec (built in)" if third is None else f"the distribution {third.distribution} ({third.entry_point})"


def _checked(ep: metadata.EntryPoint) -> ThirdParty:
    """The method of one entry point, or a MethodError naming its distribution."""
    dist = ep.dist
    name, version = (dist.metadata["Name"], dist.version) if dist is not None else ("(unknown distribution)", "0")
    about = f"the speculative method {ep.name!r} of the installed distribution {name} ({GROUP}: {ep.value})"
    try:
        obj = ep.load()
    except Exception as exc:  # any failure of foreign code at import: named, never a traceback of ours
        raise MethodError(f"{about} fails to import: {type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, Method):
        raise MethodError(f"{about} is a {type(obj).__name__}, not a builder.speculative.method.Method")
    literal = (
        typing.get_args(obj.config.model_fields["method"].annotation) if "method" in obj.config.model_fields else ()
    )
    if obj.name != ep.name or literal != (obj.name,):
        raise MethodError(
            f"{about}: its Method is named {obj.name!r} and its config's method field takes {list(literal)}; "
            "the entry point's name, Method.name and the config's `method: Literal[...]` must be one name"
        )
    package = ep.module.partition(".")[0]
    top = __import__(package)
    path = Path(top.__file__ or "")
    root = path.parent.parent if path.name == "__init__.py" else path.parent
    return ThirdParty(replace(obj, module=ep.module), name, version, ep.value, package, root)


def _discover() -> tuple[dict[str, Method], list[ThirdParty]]:
    found: dict[str, Method] = {}
    owners: dict[str, ThirdParty | None] = {}
    for m in BUILTIN:
        found[m.name] = replace(m, module=f"builder.speculative.{m.name}.method")
        owners[m.name] = None
    third = []
    for ep in sorted(metadata.entry_points(group=GROUP), key=lambda e: e.name):
        t = _checked(ep)
        if t.method.name in found:
            raise MethodError(
                f"two speculative methods named {t.method.name!r}: {_where(owners[t.method.name])} and {_where(t)}; "
                "uninstall one"
            )
        found[t.method.name], owners[t.method.name] = t.method, t
        third.append(t)
    return found, third


def _found() -> tuple[dict[str, Method], list[ThirdParty]]:
    global _FOUND
    if _FOUND is None:
        _FOUND = _discover()
    return _FOUND


def reset() -> None:
    """Discover again at the next question (tests that install or remove a method)."""
    global _FOUND
    _FOUND = None


def methods() -> dict[str, Method]:
    return _found()[0]


def third_party() -> list[ThirdParty]:
    return list(_found()[1])


def names() -> tuple[str, ...]:
    return tuple(methods())


def configs() -> tuple[type, ...]:
    """Every method's config class, in registry order: the recipe schema's discriminated union."""
    return tuple(m.config for m in methods().values())


def get(name: str, field: str = "speculative.method") -> Method:
    m = methods().get(name)
    if m is None:
        raise UserError(f"unknown method {name!r}", field=field, allowed=", ".join(methods()))
    return m


def of(config: Config) -> Method:
    """The method whose config `config` is."""
    return get(config.method)


def drafter_config(data: Any) -> Config:
    """A drafter config validated by its method's config class: a dict (engine.json's "drafter", `{"method":
    "none"}`) or a config already."""
    name = data.get("method") if isinstance(data, dict) else getattr(data, "method", None)
    if not isinstance(name, str):
        raise ValueError(f"a drafter config names its method: {data!r}")
    return get(name).validate(data)


def facts(config: Config) -> Facts:
    """The facts of a resolved config (its static tree inline)."""
    return of(config).facts(config)


def zero_weight() -> tuple[str, ...]:
    """Methods any recipe's engine runs (`--method`): no weights of their own, nothing exported for them."""
    return tuple(name for name, m in methods().items() if m.zero_weight)


def default_room() -> int:
    """Tree nodes (root included) every engine is exported with room for: the largest default draft of the built-in
    zero-weight methods (Lookahead W = N = G = 4 and n-gram's defaults: 24), so `--method lookahead` / `ngram` runs
    on any recipe's engine. Built-in only: an installed method never changes what an engine holds."""
    return max(m.facts(m.default()).max_nodes for m in BUILTIN if m.zero_weight)
