"""The provider profile: all four variables or none, values never echoed, the secret root-confined."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import pytest

from loop.errors import HarnessError, ProviderError
from loop.providers.profile import (
    ENV_ALLOW_CIDRS,
    ENV_BASE_URL,
    ENV_CA_FILE,
    ENV_MODEL,
    ENV_SECRET_FILE,
    ENV_SECRET_ROOT,
    ProviderProfile,
    ProviderProfileError,
    profile_from_env,
    profile_status,
    read_secret,
)
from tests.loop.providers.fake_openai_server import TEST_SECRET

FULL = {
    ENV_BASE_URL: "https://llm.sekrit-host.example/v1",
    ENV_MODEL: "sekrit-model-7b",
    ENV_SECRET_FILE: "provider.key",
    ENV_SECRET_ROOT: "/run/sekrit-root",
}
VALUES = tuple(FULL.values())


def without(*names: str, **extra: str) -> dict[str, str]:
    env = {name: value for name, value in FULL.items() if name not in names}
    env.update(extra)
    return env


def assert_no_value_echoed(error: Exception) -> None:
    text = f"{error} {error!r}"
    assert "sekrit" not in text
    assert not any(value in text for value in VALUES)


# --- all four or none -------------------------------------------------------------------------------


def test_no_variables_means_the_deterministic_posture() -> None:
    assert profile_from_env({}) is None
    assert profile_from_env({ENV_BASE_URL: "  ", ENV_ALLOW_CIDRS: "10.0.0.0/8"}) is None
    assert profile_status({}) == "disabled"


def test_all_four_variables_build_a_profile() -> None:
    env = without(**{ENV_ALLOW_CIDRS: "10.0.0.0/8,::1/128", ENV_CA_FILE: "/etc/skald/ca.pem"})
    profile = profile_from_env(env)
    assert profile == ProviderProfile(
        base_url="https://llm.sekrit-host.example/v1",
        model="sekrit-model-7b",
        secret_file="provider.key",
        secret_root="/run/sekrit-root",
        allow_cidrs=(ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1/128")),
        ca_file="/etc/skald/ca.pem",
    )
    assert profile_status(env) == "configured"


@pytest.mark.parametrize(
    "missing",
    [
        (ENV_BASE_URL,),
        (ENV_MODEL,),
        (ENV_SECRET_FILE,),
        (ENV_SECRET_ROOT,),
        (ENV_MODEL, ENV_SECRET_ROOT),
        (ENV_BASE_URL, ENV_MODEL, ENV_SECRET_FILE),
    ],
)
def test_a_partial_profile_refuses_naming_the_missing_variables_only(missing: tuple[str, ...]) -> None:
    env = without(*missing)
    with pytest.raises(ProviderProfileError) as caught:
        profile_from_env(env)
    assert isinstance(caught.value, HarnessError)
    assert caught.value.code == "provider_profile_invalid"
    for name in missing:
        assert name in str(caught.value)
    for name in set(FULL) - set(missing):
        assert name not in str(caught.value)
    assert_no_value_echoed(caught.value)
    assert profile_status(env) == "invalid"


def test_a_blank_variable_counts_as_missing() -> None:
    with pytest.raises(ProviderProfileError, match=ENV_MODEL):
        profile_from_env({**FULL, ENV_MODEL: "   "})


# --- value validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://llm.sekrit-host.example/v1",
        "https://user:sekrit@llm.sekrit-host.example/v1",
        "https://llm.sekrit-host.example/v1?key=sekrit",
        "https://llm.sekrit-host.example/v1#sekrit",
        "https:///sekrit",
        "sekrit-host.example",
        "https://sekrit host.example/",
    ],
)
def test_a_malformed_base_url_refuses_without_echoing_it(url: str) -> None:
    with pytest.raises(ProviderProfileError, match=ENV_BASE_URL) as caught:
        profile_from_env({**FULL, ENV_BASE_URL: url})
    assert_no_value_echoed(caught.value)
    assert "sekrit" not in str(caught.value)


def test_a_bad_allow_cidr_refuses_by_position() -> None:
    with pytest.raises(ProviderProfileError, match=f"{ENV_ALLOW_CIDRS}: entry 2") as caught:
        profile_from_env({**FULL, ENV_ALLOW_CIDRS: "10.0.0.0/8,sekrit/99"})
    assert_no_value_echoed(caught.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (ENV_SECRET_ROOT, "relative/sekrit"),
        (ENV_SECRET_FILE, "../sekrit.key"),
        (ENV_SECRET_FILE, "sub/../../sekrit.key"),
        (ENV_CA_FILE, "relative/sekrit-ca.pem"),
    ],
)
def test_unsafe_paths_refuse_at_boot(name: str, value: str) -> None:
    with pytest.raises(ProviderProfileError, match=name) as caught:
        profile_from_env({**FULL, name: value})
    assert_no_value_echoed(caught.value)


# --- the root-confined secret -----------------------------------------------------------------------


def profile_for(root: Path, secret_file: str) -> ProviderProfile:
    return ProviderProfile(base_url="https://llm.example/v1", model="m", secret_file=secret_file, secret_root=str(root))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    (root / "provider.key").write_text(f"  {TEST_SECRET}\n\n")
    (tmp_path / "outside.key").write_text("sk-outside-the-root\n")
    return root


def test_the_secret_is_read_stripped(root: Path) -> None:
    assert read_secret(profile_for(root, "provider.key")) == TEST_SECRET
    assert read_secret(profile_for(root, str(root / "provider.key"))) == TEST_SECRET


def test_a_symlink_inside_the_root_is_followed(root: Path) -> None:
    (root / "sub").mkdir()
    (root / "current.key").symlink_to(root / "provider.key")
    (root / "sub" / "up.key").symlink_to("../provider.key")
    assert read_secret(profile_for(root, "current.key")) == TEST_SECRET
    assert read_secret(profile_for(root, "sub/up.key")) == TEST_SECRET


def test_a_symlinked_root_is_resolved_before_confinement(root: Path, tmp_path: Path) -> None:
    (tmp_path / "root-link").symlink_to(root)
    assert read_secret(profile_for(tmp_path / "root-link", "provider.key")) == TEST_SECRET


def refused(profile: ProviderProfile) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        read_secret(profile)
    assert caught.value.code == "provider_secret_invalid"
    text = f"{caught.value} {caught.value!r}"
    assert TEST_SECRET not in text and "outside-the-root" not in text
    assert profile.secret_root not in text
    return caught.value


def test_dot_dot_traversal_is_refused(root: Path) -> None:
    refused(profile_for(root, "../outside.key"))
    refused(profile_for(root, "sub/../../outside.key"))


def test_a_symlink_escaping_the_root_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "escape.key").symlink_to(tmp_path / "outside.key")
    (root / "dir-escape").symlink_to(tmp_path)
    refused(profile_for(root, "escape.key"))
    refused(profile_for(root, "dir-escape/outside.key"))


def test_an_absolute_path_outside_the_root_is_refused(root: Path, tmp_path: Path) -> None:
    refused(profile_for(root, str(tmp_path / "outside.key")))
    refused(profile_for(root, "/etc/passwd"))


def test_a_sibling_directory_sharing_the_prefix_is_outside(root: Path, tmp_path: Path) -> None:
    sibling = tmp_path / "root-evil"
    sibling.mkdir()
    (sibling / "k").write_text("sk-outside-the-root")
    refused(profile_for(root, str(sibling / "k")))


def test_a_directory_the_root_itself_and_a_missing_file_are_refused(root: Path) -> None:
    (root / "adir").mkdir()
    refused(profile_for(root, "adir"))
    refused(profile_for(root, "."))
    refused(profile_for(root, "missing.key"))


def test_a_fifo_is_refused_without_blocking(root: Path) -> None:
    os.mkfifo(root / "pipe.key")
    refused(profile_for(root, "pipe.key"))


@pytest.mark.parametrize(
    "content", [b"", b"   \n\t\n", b"sk-two\nlines", b"sk with spaces", "sk-\u00e9".encode(), b"\xff\xfe"]
)
def test_an_empty_or_non_token_secret_is_refused(root: Path, content: bytes) -> None:
    (root / "bad.key").write_bytes(content)
    error = refused(profile_for(root, "bad.key"))
    assert "sk-" not in str(error) and "spaces" not in str(error)


def test_an_oversized_secret_file_is_refused(root: Path) -> None:
    (root / "big.key").write_bytes(b"a" * (64 * 1024 + 1))
    refused(profile_for(root, "big.key"))


def test_a_missing_root_is_refused(tmp_path: Path) -> None:
    refused(profile_for(tmp_path / "nope", "provider.key"))
