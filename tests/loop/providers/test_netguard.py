"""SSRF screening with DNS pinning: bypass vectors, allow-list admission, pinning."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loop.cancellation import CancelToken
from loop.errors import ProviderError
from loop.providers.base import ProviderRequest, UserMessage
from loop.providers.netguard import (
    METADATA_ADDRESSES,
    IPNetwork,
    ScreenedEgress,
    SystemResolver,
    parse_allow_cidrs,
    parse_endpoint,
    refusal_reason,
    resolve_and_screen,
    screen_address,
)
from loop.providers.openai_compat import OpenAICompatProvider
from tests.loop.providers.fake_openai_server import FakeOpenAIServer, FakeResolver, StatusResponse, sse, text_chunks

SSRF = "provider_ssrf_refused"
INVALID = "provider_url_invalid"


def screen_url(url: str, answers: Mapping[str, Sequence[str]] | None = None, allow: Sequence[IPNetwork] = ()) -> str:
    endpoint = parse_endpoint(url)
    return resolve_and_screen(endpoint.host, endpoint.port, FakeResolver(answers), allow)


def nets(*cidrs: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(cidr) for cidr in cidrs)


BYPASS_VECTORS: list[tuple[str, dict[str, list[str]] | None, str]] = [
    # odd numeric IPv4 forms, decoded the lenient way and refused
    ("https://2130706433/", None, SSRF),  # decimal 127.0.0.1
    ("https://0x7f000001/", None, SSRF),  # hex
    ("https://0X7F000001/", None, SSRF),  # upper-case hex
    ("https://0177.0.0.1/", None, SSRF),  # octal first octet
    ("https://0177.0000.0000.0001/", None, SSRF),
    ("https://017700000001/", None, SSRF),  # octal whole
    ("https://127.1/", None, SSRF),  # short form
    ("https://127.0.1/", None, SSRF),
    ("https://127.000.000.001/", None, SSRF),  # zero-padded
    ("https://0x7f.0x0.0x0.0x1/", None, SSRF),
    ("https://0x7f.1/", None, SSRF),
    ("https://0/", None, SSRF),  # 0.0.0.0
    ("https://127.0.0.1./", None, SSRF),  # trailing dot
    ("https://3232235521/", None, SSRF),  # 192.168.0.1
    ("https://0xa9fea9fe/", None, SSRF),  # 169.254.169.254
    ("https://0251.0376.0251.0376/", None, SSRF),  # 169.254.169.254 in octal
    ("https://134744072/", None, INVALID),  # 8.8.8.8, public but non-canonical
    ("https://08.8.8.8/", None, INVALID),  # not octal, not decimal
    ("https://1.1.1.1.1/", None, INVALID),  # five parts
    ("https://256.0.0.1/", None, INVALID),
    # canonical IPv4 literals in refused ranges
    ("https://127.0.0.1/", None, SSRF),
    ("https://10.0.0.1/", None, SSRF),
    ("https://172.16.5.4/", None, SSRF),
    ("https://192.168.1.1/", None, SSRF),
    ("https://169.254.169.254/latest/meta-data", None, SSRF),
    ("https://169.254.1.1/", None, SSRF),
    ("https://100.100.100.200/", None, SSRF),  # Alibaba metadata
    ("https://192.0.0.192/", None, SSRF),  # Oracle metadata
    ("https://168.63.129.16/", None, SSRF),  # Azure wireserver (a public address)
    ("https://100.64.0.1/", None, SSRF),  # CGNAT
    ("https://224.0.0.1/", None, SSRF),
    ("https://255.255.255.255/", None, SSRF),
    ("https://240.0.0.1/", None, SSRF),
    ("https://198.18.0.1/", None, SSRF),  # benchmarking
    ("https://192.0.2.1/", None, SSRF),  # documentation
    ("https://203.0.113.9/", None, SSRF),
    ("https://0.0.0.0/", None, SSRF),
    # IPv6 literals and IPv4 embeddings
    ("https://[::1]/", None, SSRF),
    ("https://[::]/", None, SSRF),
    ("https://[0:0:0:0:0:0:0:1]/", None, SSRF),
    ("https://[::ffff:127.0.0.1]/", None, SSRF),  # IPv4-mapped
    ("https://[::ffff:7f00:1]/", None, SSRF),
    ("https://[::ffff:169.254.169.254]/", None, SSRF),
    ("https://[::ffff:10.0.0.1]/", None, SSRF),
    ("https://[::127.0.0.1]/", None, SSRF),  # IPv4-compatible
    ("https://[::8.8.8.8]/", None, SSRF),  # IPv4-compatible is deprecated whatever it embeds
    ("https://[64:ff9b::7f00:1]/", None, SSRF),  # NAT64 well-known prefix
    ("https://[64:ff9b::a9fe:a9fe]/", None, SSRF),
    ("https://[64:ff9b:1::a00:1]/", None, SSRF),  # local-use NAT64, last 32 bits
    ("https://[64:ff9b:1:a00:0:100::]/", None, SSRF),  # local-use NAT64, RFC 6052 /48 layout
    ("https://[2002:7f00:1::1]/", None, SSRF),  # 6to4 of 127.0.0.1
    ("https://[2002:a9fe:a9fe::1]/", None, SSRF),  # 6to4 of the metadata address
    ("https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", None, SSRF),  # Teredo client 127.0.0.1
    ("https://[2001:0:a00:1::f7f7:f7f7]/", None, SSRF),  # Teredo server 10.0.0.1
    ("https://[fd00:ec2::254]/", None, SSRF),  # AWS IMDS over IPv6
    ("https://[fc00::1]/", None, SSRF),
    ("https://[fe80::1]/", None, SSRF),
    ("https://[fec0::1]/", None, SSRF),
    ("https://[ff02::1]/", None, SSRF),
    ("https://[2001:db8::1]/", None, SSRF),
    ("https://[fe80::1%25eth0]/", None, INVALID),  # zone id
    ("https://[fe80::1%eth0]/", None, INVALID),
    # names resolving to refused addresses
    ("https://localhost/", {"localhost": ["127.0.0.1"]}, SSRF),
    ("https://LOCALHOST/", {"localhost": ["::1"]}, SSRF),
    ("https://metadata.google.internal/", {"metadata.google.internal": ["169.254.169.254"]}, SSRF),
    ("https://intranet.example.com/", {"intranet.example.com": ["10.1.2.3"]}, SSRF),
    ("https://127.0.0.1.nip.io/", {"127.0.0.1.nip.io": ["127.0.0.1"]}, SSRF),
    ("https://mixed.example.com/", {"mixed.example.com": ["93.184.216.34", "10.0.0.5"]}, SSRF),
    ("https://mixed6.example.com/", {"mixed6.example.com": ["2606:2800:220:1::1", "::1"]}, SSRF),
    ("https://mapped.example.com/", {"mapped.example.com": ["::ffff:127.0.0.1"]}, SSRF),
    ("https://dns64.example.com/", {"dns64.example.com": ["64:ff9b::a9fe:a9fe"]}, SSRF),
    ("https://zone.example.com/", {"zone.example.com": ["fe80::1%eth0"]}, SSRF),
    ("https://junk.example.com/", {"junk.example.com": ["not-an-address"]}, SSRF),
    ("https://short.example.com/", {"short.example.com": ["127.1"]}, SSRF),  # resolver junk
    # URL parser confusion
    ("https://evil.com@127.0.0.1/", None, INVALID),
    ("https://user:pass@good.example/", None, INVALID),
    ("https://127.0.0.1#@good.example", None, INVALID),
    ("https://good.example#@127.0.0.1", None, INVALID),
    ("https://good.example?@127.0.0.1", None, INVALID),
    ("https://127.0.0.1\\@good.example/", None, INVALID),
    ("https://good.example\\@127.0.0.1/", None, INVALID),
    ("https:\\\\127.0.0.1/", None, INVALID),
    ("https://\uff11\uff12\uff17.\uff10.\uff10.\uff11/", None, INVALID),  # full-width digits
    ("https://\u0661\u0662\u0667.0.0.1/", None, INVALID),  # Arabic-Indic digits
    ("https://127.0.0.\u00b9/", None, INVALID),  # superscript one
    ("https://127。0。0。1/", None, INVALID),  # ideographic full stops
    ("https://%31%32%37.0.0.1/", None, INVALID),
    ("https://localhost./", None, INVALID),  # trailing dot on a name
    ("https://good_example.com/", None, INVALID),
    ("https://good.example\n.127.0.0.1/", None, INVALID),
    ("https://good.example\t/", None, INVALID),
    (" https://good.example/", None, INVALID),
    ("http://good.example/", None, INVALID),
    ("https:/good.example/", None, INVALID),
    ("https:///127.0.0.1/", None, INVALID),
    ("https://good.example:0/", None, INVALID),
    ("https://good.example:65536/", None, INVALID),
    ("https://good.example:0443/", None, INVALID),
    ("https://good.example:443:443/", None, INVALID),
    ("https://::1/", None, INVALID),  # unbracketed IPv6
    ("https://[::1/", None, INVALID),
    ("https://[::1]evil.example/", None, INVALID),
    ("https://[127.0.0.1]/", None, INVALID),
]


@pytest.mark.parametrize(("url", "answers", "code"), BYPASS_VECTORS)
def test_it_refuses_the_bypass_vector(url: str, answers: dict[str, list[str]] | None, code: str) -> None:
    with pytest.raises(ProviderError) as caught:
        screen_url(url, answers)
    assert caught.value.code == code
    # The refusal names the range, never the address or the host.
    assert "127.0.0.1" not in str(caught.value)
    assert "example" not in str(caught.value)


def test_there_are_at_least_45_bypass_vectors() -> None:
    assert len(BYPASS_VECTORS) >= 45


@pytest.mark.parametrize(
    ("url", "answers", "pinned"),
    [
        ("https://api.openai.com/v1", {"api.openai.com": ["104.18.7.192"]}, "104.18.7.192"),
        ("https://8.8.8.8/v1", None, "8.8.8.8"),
        ("https://[2606:4700::6810:84e5]:8443/v1", None, "2606:4700::6810:84e5"),
        ("https://dns64.example.com/", {"dns64.example.com": ["64:ff9b::808:808"]}, "64:ff9b::808:808"),
        ("https://mapped.example.com/", {"mapped.example.com": ["::ffff:8.8.8.8"]}, "::ffff:808:808"),
        ("https://xn--bcher-kva.example/", {"xn--bcher-kva.example": ["93.184.216.34"]}, "93.184.216.34"),
        ("HTTPS://Api.Example.COM/v1", {"api.example.com": ["93.184.216.34"]}, "93.184.216.34"),
    ],
)
def test_it_admits_public_addresses(url: str, answers: dict[str, list[str]] | None, pinned: str) -> None:
    assert screen_url(url, answers) == pinned


def test_it_pins_the_first_of_several_public_answers_and_resolves_once() -> None:
    resolver = FakeResolver({"api.example.com": ["93.184.216.34", "93.184.216.35"]})
    assert resolve_and_screen("api.example.com", 443, resolver) == "93.184.216.34"
    assert resolver.calls == [("api.example.com", 443)]


def test_a_rebinding_answer_after_the_check_is_never_consulted() -> None:
    resolver = FakeResolver({"rebind.example.com": ["93.184.216.34"]}).then("rebind.example.com", ["127.0.0.1"])
    assert resolve_and_screen("rebind.example.com", 443, resolver) == "93.184.216.34"
    assert len(resolver.calls) == 1  # the pinned address is what the caller connects to
    with pytest.raises(ProviderError) as caught:  # the next request screens its own answer
        resolve_and_screen("rebind.example.com", 443, resolver)
    assert caught.value.code == SSRF


def test_a_name_that_resolves_to_nothing_is_refused() -> None:
    with pytest.raises(ProviderError) as caught:
        resolve_and_screen("empty.example.com", 443, FakeResolver({"empty.example.com": []}))
    assert caught.value.code == "provider_dns_failed"


def test_the_system_resolver_answers_from_the_hosts_file() -> None:
    answers = SystemResolver().resolve("localhost", 443)
    assert set(answers) & {"127.0.0.1", "::1"}
    with pytest.raises(ProviderError) as caught:
        resolve_and_screen("localhost", 443, SystemResolver())
    assert caught.value.code == SSRF


# --- the operator allow-list ----------------------------------------------------------------------


def test_an_allow_listed_network_admits_a_private_literal_and_name() -> None:
    allow = nets("10.0.0.0/8")
    assert screen_url("https://10.1.2.3/v1", allow=allow) == "10.1.2.3"
    assert screen_url("https://llm.internal/v1", {"llm.internal": ["10.9.8.7"]}, allow) == "10.9.8.7"


def test_the_allow_list_admits_only_what_falls_inside_it() -> None:
    allow = nets("127.0.0.1/32")
    with pytest.raises(ProviderError):
        screen_url("https://127.0.0.2/", allow=allow)
    with pytest.raises(ProviderError):  # every answer must pass, allow-listed or not
        screen_url("https://llm.internal/", {"llm.internal": ["127.0.0.1", "10.0.0.1"]}, allow)


def test_the_allow_list_admits_the_ipv4_mapped_form_of_an_admitted_address() -> None:
    assert screen_url("https://[::ffff:127.0.0.1]/", allow=nets("127.0.0.1/32")) == "::ffff:7f00:1"


def test_the_allow_list_admits_ipv6_loopback_when_listed() -> None:
    assert screen_url("https://[::1]:8443/", allow=nets("::1/128")) == "::1"


def test_the_allow_list_never_admits_a_non_canonical_literal() -> None:
    with pytest.raises(ProviderError, match="non-canonical"):
        screen_url("https://127.1/", allow=nets("127.0.0.0/8"))
    with pytest.raises(ProviderError, match="non-canonical"):
        screen_url("https://134744072/", allow=nets("8.8.8.8/32"))


def test_the_allow_list_can_admit_a_metadata_address_only_explicitly() -> None:
    screen_address("169.254.169.254", nets("169.254.169.254/32"))
    with pytest.raises(ProviderError):
        screen_address("169.254.169.254", nets("10.0.0.0/8"))


def test_allow_cidrs_parse_and_refuse_without_echoing() -> None:
    assert parse_allow_cidrs(" 10.0.0.0/8, ,::1/128 ") == nets("10.0.0.0/8", "::1/128")
    assert parse_allow_cidrs("") == ()
    for text, position in (("10.0.0.1/8", "1"), ("10.0.0.0/8,sekrit-net", "2")):
        with pytest.raises(ValueError, match=f"entry {position}") as caught:
            parse_allow_cidrs(text)
        assert "sekrit" not in str(caught.value)


# --- properties -------------------------------------------------------------------------------------

REFUSED_V4 = st.sampled_from(
    ["127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"]
).flatmap(
    lambda cidr: st.integers(0, ipaddress.ip_network(cidr).num_addresses - 1).map(
        lambda offset: ipaddress.ip_network(cidr)[offset]
    )
)


def _embeddings(v4: ipaddress.IPv4Address) -> list[ipaddress.IPv6Address]:
    value = int(v4)
    return [
        ipaddress.IPv6Address((0xFFFF << 32) | value),  # ::ffff:a.b.c.d
        ipaddress.IPv6Address(value),  # ::a.b.c.d
        ipaddress.IPv6Address((0x0064FF9B << 96) | value),  # 64:ff9b::/96
        ipaddress.IPv6Address((0x0064FF9B0001 << 80) | value),  # 64:ff9b:1::/48
        ipaddress.IPv6Address((0x2002 << 112) | (value << 80)),  # 6to4
        ipaddress.IPv6Address((0x20010000 << 96) | (value ^ 0xFFFFFFFF)),  # Teredo client
        ipaddress.IPv6Address((0x20010000 << 96) | (value << 64)),  # Teredo server
    ]


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(REFUSED_V4)
def test_every_ipv6_embedding_of_a_refused_ipv4_address_is_refused(v4: ipaddress.IPv4Address) -> None:
    assert refusal_reason(v4) is not None
    for v6 in _embeddings(v4):
        with pytest.raises(ProviderError):
            screen_address(v6)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.text(max_size=40))
def test_the_url_parser_never_crashes_and_yields_only_clean_hosts(junk: str) -> None:
    try:
        endpoint = parse_endpoint(f"https://{junk}")
    except ProviderError as exc:
        assert exc.code in (INVALID, SSRF)
        return
    assert endpoint.host.isascii() and not set(endpoint.host) & set("@#?\\%/ ")


def test_every_metadata_address_is_refused() -> None:
    for address in METADATA_ADDRESSES:
        with pytest.raises(ProviderError, match="metadata"):
            screen_address(address)


# --- end to end: redirects and rebinding against the real HTTPS server ----------------------------

REQUEST = ProviderRequest(system="", messages=(UserMessage("hi"),))


def test_a_redirect_is_refused_and_not_followed(
    server: FakeOpenAIServer, make_provider: Callable[..., OpenAICompatProvider]
) -> None:
    with FakeOpenAIServer([sse(text_chunks("leaked"))]) as target:
        server.push(StatusResponse(302, headers={"Location": f"{target.base_url}/chat/completions"}))
        with pytest.raises(ProviderError) as caught:
            list(make_provider().stream(REQUEST, cancel=CancelToken()))
        assert caught.value.code == "provider_redirect_refused"
        assert target.requests == []


def test_rebinding_cannot_switch_the_connected_address(
    server: FakeOpenAIServer, make_provider: Callable[..., OpenAICompatProvider], resolver: FakeResolver
) -> None:
    # provider.skald.test exists only in the scripted resolver: had anything but the pinned address
    # been used (a second lookup by the HTTP stack), the request could not have reached the server.
    resolver.then("provider.skald.test", ["10.0.0.1"])
    server.push(sse(text_chunks("pinned")), sse(text_chunks("never")))
    provider = make_provider(base_url=server.url_for("provider.skald.test"))
    assert next(d for d in provider.stream(REQUEST, cancel=CancelToken()) if d.kind == "text").text == "pinned"
    assert resolver.calls == [("provider.skald.test", server.port)]
    assert server.requests[0].headers["host"] == f"provider.skald.test:{server.port}"
    assert server.requests[0].sni == "provider.skald.test"
    with pytest.raises(ProviderError) as caught:  # the rebound answer is screened on the next request
        list(provider.stream(REQUEST, cancel=CancelToken()))
    assert caught.value.code == SSRF
    assert len(server.requests) == 1


class _SettingInvalid(Exception):
    pass


def test_a_features_egress_reads_its_setting_at_each_use_and_raises_its_own_error() -> None:
    setting = {"cidrs": "10.1.0.0/16"}
    egress = ScreenedEgress(lambda: setting["cidrs"], _SettingInvalid)
    egress.set_resolver(FakeResolver({"svc.internal.example": ["10.1.2.3"]}))

    assert egress.screen("svc.internal.example", 443) == "10.1.2.3"  # admitted by the setting
    setting["cidrs"] = ""
    with pytest.raises(ProviderError) as refused:
        egress.screen("svc.internal.example", 443)
    assert refused.value.code == "provider_ssrf_refused"
    setting["cidrs"] = "10.1.0.0/33"
    with pytest.raises(_SettingInvalid, match="entry 1"):
        egress.allow_cidrs()
    egress.set_resolver(None)
    assert isinstance(egress.resolver, SystemResolver)
