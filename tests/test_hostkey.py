"""Destination keys: every spelling of one receiver gets one key; different receivers, not."""

from __future__ import annotations

import pytest

from hookrelay.outbox.destinations import _netloc_key, host_key
from hookrelay.outbox.errors import InvalidCallbackUrl
from hookrelay.outbox.tasks.transitions import destination_host

LOOPBACK_8080 = [
    "http://127.0.0.1:8080",
    "http://127.0.0.1:8080/",
    "http://127.0.0.1:8080/hooks?x=1",
    "HTTP://127.0.0.1:8080/a",
    "http://user:pw@127.0.0.1:8080/",
    "http://[::ffff:127.0.0.1]:8080/",
    "http://[::FFFF:7F00:1]:8080/",
    "http://[0:0:0:0:0:ffff:127.0.0.1]:8080/",
    "http://[::127.0.0.1]:8080/",  # IPv4-compatible
    "http://[64:ff9b::127.0.0.1]:8080/",  # NAT64
    "http://[2002:7f00:1::]:8080/",  # 6to4
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:8080/",  # Teredo, client 127.0.0.1
    "http://127.1:8080/",
    "http://0x7f000001:8080/",
    "http://2130706433:8080/",
    "http://0177.0.0.1:8080/",
]


@pytest.mark.parametrize("url", LOOPBACK_8080)
def test_spellings_of_one_ipv4_receiver_share_a_key(url: str) -> None:
    assert host_key(url) == "http://127.0.0.1:8080"


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("https://Hooks.Example.COM/x", "https://hooks.example.com:443"),
        ("https://hooks.example.com./x", "https://hooks.example.com:443"),
        ("https://hooks.example.com:443/x", "https://hooks.example.com:443"),
        ("http://hooks.example.com/x", "http://hooks.example.com:80"),
        ("http://hooks.example.com:80/x", "http://hooks.example.com:80"),
        ("https://hooks.example.com:8443", "https://hooks.example.com:8443"),
        ("https://bücher.example/x", "https://xn--bcher-kva.example:443"),
        ("https://BÜCHER.example./x", "https://xn--bcher-kva.example:443"),
        ("https://xn--bcher-kva.example/x", "https://xn--bcher-kva.example:443"),
        ("https://[2606:4700::1111]/", "https://[2606:4700::1111]:443"),
        ("https://[2606:4700:0:0:0:0:0:1111]:443/", "https://[2606:4700::1111]:443"),
        ("https://[2606:4700::ABCD]/", "https://[2606:4700::abcd]:443"),
        ("https://[fe80::1%25eth0]/", "https://[fe80::1]:443"),
        ("http://[::1]:8080/", "http://[::1]:8080"),
        ("http://[::]:8080/", "http://[::]:8080"),
        ("https://93.184.215.14/", "https://93.184.215.14:443"),
    ],
)
def test_canonical_form(url: str, key: str) -> None:
    assert host_key(url) == key


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("http://127.0.0.1:8080", "https://127.0.0.1:8080"),  # scheme is part of the key
        ("http://127.0.0.1:8080", "http://127.0.0.1:8081"),
        ("http://127.0.0.1/", "http://127.0.0.2/"),
        ("https://a.example/", "https://b.example/"),
        ("https://a.example/", "https://a.example.org/"),
        ("http://[::1]:80/", "http://127.0.0.1:80/"),  # ::1 is not IPv4-compatible
        ("https://localhost/", "https://127.0.0.1/"),  # names are not resolved
    ],
)
def test_different_destinations_get_different_keys(a: str, b: str) -> None:
    assert host_key(a) != host_key(b)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "ftp://example.com/",
        "example.com/path",
        "http:///path",
        "http://:8080/",
        "http://example.com:http/",
        "http://example.com:0/",
        "http://example.com:65536/",
        "http://[::1/",
        "http://[not-v6]/",
        "http://.../",
    ],
)
def test_unusable_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidCallbackUrl):
        host_key(url)


def test_outbox_rows_are_keyed_by_it() -> None:
    assert destination_host("http://[::ffff:127.0.0.1]:9/x") == "http://127.0.0.1:9"


def test_keys_are_remembered_by_host_and_refusals_are_not() -> None:
    """Every submit computes its key: a host seen before costs a lookup, and the answer
    is the same whatever the path, query or credentials of the URL."""
    _netloc_key.cache_clear()
    assert host_key("https://Hooks.Example.com/a?x=1") == "https://hooks.example.com:443"
    assert host_key("https://user:pw@Hooks.Example.com/b") == "https://hooks.example.com:443"
    assert _netloc_key.cache_info().hits == 1
    for _ in range(2):
        with pytest.raises(InvalidCallbackUrl):
            host_key("https://example.com:99999/")
