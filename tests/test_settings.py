from pathlib import Path

import pytest

from jlse.settings import Settings, SettingsError, apply_overrides, load_settings


def test_defaults_are_valid():
    s = Settings().validate()
    assert s.max_bytes == 2 * 1024 * 1024
    assert s.max_redirects == 5 and s.cf == 150 and s.max_url_length == 2048


def test_precedence_defaults_toml_cli(tmp_path: Path):
    toml = tmp_path / "topic.toml"
    toml.write_text('name = "phones"\nmax_pages = 50\npoliteness_delay = 0.5\n'
                    '[crawl]\nconcurrency = 4\n')
    s = load_settings(toml, {"max_pages": "70", "strategy": None})
    assert s.name == "phones"
    assert s.max_pages == 70  # CLI beats topic.toml
    assert s.politeness_delay == 0.5  # topic.toml beats the default
    assert s.concurrency == 4  # a [table] is flattened
    assert s.strategy == "auto"  # None on the command line means "not given"


def test_unknown_key_is_named(tmp_path: Path):
    toml = tmp_path / "topic.toml"
    toml.write_text("max_pagez = 3\n")
    with pytest.raises(SettingsError, match="max_pagez.*unknown setting"):
        load_settings(toml)


@pytest.mark.parametrize("key,value", [
    ("max_pages", "many"), ("max_pages", 1.5), ("obey_robots", "perhaps"),
    ("politeness_delay", "slow"), ("allowed_domains", 3), ("user_agent", 12),
])
def test_wrong_type_is_named(key, value):
    with pytest.raises(SettingsError, match=key):
        apply_overrides(Settings(), {key: value}, source="test")


@pytest.mark.parametrize("key,value", [
    ("max_pages", 0), ("relevance_threshold", 1.5),  # strategy names: test_strategies.py
    ("read_timeout", 0), ("field_weights", [1, 2]), ("host_concurrency", 0),
    ("host_concurrency", 4),  # with the default politeness_delay: refused
    ("link_text_model", "anchors"),
])
def test_impossible_values(key, value):
    with pytest.raises(SettingsError, match=key):
        apply_overrides(Settings(), {key: value}, source="test")


@pytest.mark.parametrize("value", ["socks5://h:1080", "127.0.0.1:3128", "http://", "none",
                                   "http://jo:s3cret@h:x"])
def test_search_proxy_is_a_proxy_url_or_direct(value):
    with pytest.raises(SettingsError, match="search_proxy: .*direct.*http") as refused:
        apply_overrides(Settings(), {"search_proxy": value}, source="test")
    assert "s3cret" not in str(refused.value)
    for good in ("", "direct", "http://jo:s3cret@proxy.example:3128", "https://p.example"):
        assert apply_overrides(Settings(), {"search_proxy": good}, source="t").search_proxy == good


def test_cli_strings_are_typed():
    s = apply_overrides(Settings(), {"max-pages": "1_000", "obey_robots": "false",
                                     "allowed_domains": "a.test, b.test"}, source="cli")
    assert s.max_pages == 1000 and s.obey_robots is False
    assert s.allowed_domains == ["a.test", "b.test"]


def test_bad_toml_is_a_clear_error(tmp_path: Path):
    toml = tmp_path / "topic.toml"
    toml.write_text("name = \n")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings(toml)


def test_toml_with_a_byte_order_mark_is_read(tmp_path: Path):
    toml = tmp_path / "topic.toml"
    toml.write_bytes(b"\xef\xbb\xbfmax_pages = 7\n")
    assert load_settings(toml).max_pages == 7


def test_toml_that_is_not_utf8_names_the_file(tmp_path: Path):
    toml = tmp_path / "topic.toml"
    toml.write_bytes("name = \"caf\xe9\"\n".encode("latin-1"))
    with pytest.raises(SettingsError, match="topic.toml: not UTF-8"):
        load_settings(toml)


def test_non_defaults_lists_only_what_was_changed():
    changed = Settings().replace(max_pages=5, proxy="http://p:1").non_defaults()
    assert changed == {"max_pages": 5, "proxy": "http://p:1"}
