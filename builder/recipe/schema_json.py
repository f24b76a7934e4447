"""The recipe JSON schema as committed in recipes/schema.json."""

from __future__ import annotations

import json

from builder.recipe.schema import Recipe


def schema_text() -> str:
    schema = Recipe.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "trtspec recipe"
    schema.setdefault("properties", {})["extends"] = {
        "description": "Recipe(s) this one extends: a path relative to this file, or a list merged in order.",
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
    }
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
