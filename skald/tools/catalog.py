"""The built-in tool set. An agent gets the subset its catalog entry allows (never more)."""

from __future__ import annotations

from loop.tools.registry import ToolRegistry
from skald.tools.delegation import DELEGATION_TOOLS
from skald.tools.exec import EXECUTE_CMD
from skald.tools.files import READ_FILE, WRITE_FILE
from skald.tools.human import ASK_HUMAN
from skald.tools.knowledge import READ_LOGS, SEARCH_KNOWLEDGE
from skald.tools.proposing import PROPOSE_KNOWLEDGE
from skald.tools.scratchpad import SCRATCHPAD_GET, SCRATCHPAD_SET

BUILTIN_TOOLS = ToolRegistry(
    [SEARCH_KNOWLEDGE, READ_LOGS, READ_FILE, WRITE_FILE, EXECUTE_CMD, SCRATCHPAD_GET, SCRATCHPAD_SET,
     PROPOSE_KNOWLEDGE, ASK_HUMAN, *DELEGATION_TOOLS]
)

READ_ONLY_TOOLS = frozenset({"search_knowledge", "read_logs", "read_file", "scratchpad_get", "scratchpad_set",
                             "propose_knowledge", "ask_human", "list_agents"})
