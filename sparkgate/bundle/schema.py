"""The profile model's JSON Schema, committed at schema/profile.schema.json."""

from __future__ import annotations

import json

from sparkgate.paths import repo_root
from sparkgate.profile.model import Profile

SCHEMA_PATH = "schema/profile.schema.json"


def schema_text() -> str:
    schema = Profile.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$comment"] = "generated from sparkgate.profile.model.Profile by `invoke schema` - do not edit"
    return json.dumps(schema, indent=1, sort_keys=True) + "\n"


def committed_schema_path():
    return repo_root() / SCHEMA_PATH
