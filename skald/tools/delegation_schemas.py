"""The delegation tools' argument schemas (SPEC S1, S4): stable, because models are prompted with
them. Pure data (no Django import), so the OpenAPI document can publish them as components
(``settings.SPECTACULAR_SETTINGS["APPEND_COMPONENTS"]``) and ``docs/delegation.md`` can cite them."""

from __future__ import annotations

from typing import Any

MODE = {"type": "string", "enum": ["sync", "async"], "default": "sync",
        "description": "sync: wait for the child's answer; async: start a background task and get its id now."}
TASK = {"type": "string", "minLength": 1, "maxLength": 8192, "description": "What the child should do."}

EXECUTE_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "agent": {"type": "string", "minLength": 1, "maxLength": 64, "description": "A task agent (list_agents)."},
        "task": TASK,
        "mode": MODE,
        "client": {"type": "string", "maxLength": 32,
                   "description": "Optional model override; by default the agent's client or its strength decides."},
    },
    "required": ["agent", "task"],
    "additionalProperties": False,
}
EXECUTE_SUBTASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": TASK,
        "tools": {"type": "array", "items": {"type": "string", "maxLength": 128}, "maxItems": 64,
                  "description": "Optional: only these of your own tools (never more)."},
        "mode": MODE,
    },
    "required": ["task"],
    "additionalProperties": False,
}
LIST_AGENTS_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
CRON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["create", "list", "cancel"]},
        "expression": {"type": "string", "maxLength": 120, "description": "Cron expression (create)."},
        "agent": {"type": "string", "maxLength": 64, "description": "A task agent (create)."},
        "task": {"type": "string", "maxLength": 8192, "description": "What each run should do (create)."},
        "job": {"type": "integer", "minimum": 1, "description": "The cron job to cancel (cancel)."},
    },
    "required": ["action"],
    "additionalProperties": False,
}

# Published in /api/schema/ under these component names.
TOOL_ARGUMENT_SCHEMAS: dict[str, dict[str, Any]] = {
    "ExecuteTaskArguments": EXECUTE_TASK_SCHEMA,
    "ExecuteSubtaskArguments": EXECUTE_SUBTASK_SCHEMA,
    "ListAgentsArguments": LIST_AGENTS_SCHEMA,
    "CronArguments": CRON_SCHEMA,
}


def openapi_components() -> dict[str, dict[str, Any]]:
    """The argument schemas as OpenAPI components, their enums as named components of their own.

    drf-spectacular would extract the enums of appended components itself, into references that
    client generators cannot resolve; naming them here keeps /api/schema/ generator-clean. The
    tools keep validating with the originals above.
    """
    components: dict[str, dict[str, Any]] = {}
    for name, schema in TOOL_ARGUMENT_SCHEMAS.items():
        properties: dict[str, Any] = {}
        for field, spec in schema["properties"].items():
            if "enum" not in spec:
                properties[field] = dict(spec)
                continue
            enum_name = f"{name.removesuffix('Arguments')}{field.title()}"
            components[enum_name] = {"type": spec["type"], "enum": list(spec["enum"])}
            wrapped: dict[str, Any] = {"allOf": [{"$ref": f"#/components/schemas/{enum_name}"}]}
            wrapped.update({key: spec[key] for key in ("default", "description") if key in spec})
            properties[field] = wrapped
        components[name] = {**schema, "properties": properties}
    return components
