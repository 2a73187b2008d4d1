"""Kafka's JAAS config syntax (`JaasConfig`): what parses, what fails, and that no error or
repr ever shows a value."""

from __future__ import annotations

import pytest

from sparklog.security.jaas import (
    OAUTHBEARER_LOGIN_MODULE,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    ControlFlag,
    JaasConfigError,
    parse_jaas_config,
    parse_login_module,
)

SECRET = "s3cr3t-Value"


def test_plain_login_module_with_users() -> None:
    module = parse_login_module(
        f'{PLAIN_LOGIN_MODULE} required username="admin" password="{SECRET}" '
        'user_admin="admin-pw" user_alice=alice-pw;'
    )
    assert module.class_name == PLAIN_LOGIN_MODULE
    assert module.control_flag is ControlFlag.REQUIRED
    assert module.options == {
        "username": "admin",
        "password": SECRET,
        "user_admin": "admin-pw",
        "user_alice": "alice-pw",
    }
    assert module.prefixed("user_") == {"admin": "admin-pw", "alice": "alice-pw"}


def test_scram_and_oauthbearer_modules_and_flags_any_case() -> None:
    scram = parse_login_module(f'{SCRAM_LOGIN_MODULE} REQUIRED username="a" password="b";')
    assert scram.control_flag is ControlFlag.REQUIRED
    oauth = parse_login_module(
        f'{OAUTHBEARER_LOGIN_MODULE} Optional unsecuredLoginStringClaim_sub="alice" '
        'unsecuredLoginListClaim_scope=",read,write" unsecuredLoginNumberClaim_n="1";',
        mechanism="OAUTHBEARER",
    )
    assert oauth.control_flag is ControlFlag.OPTIONAL
    assert oauth.prefixed("unsecuredLoginStringClaim_") == {"sub": "alice"}


def test_quotes_escapes_comments_and_line_breaks() -> None:
    text = (
        "// a leading comment\n"
        f"{PLAIN_LOGIN_MODULE} /* block\ncomment */ required\n"
        "  a='single \"quoted\"'\n"
        '  b="with \\"escaped\\" quote and \\\\ backslash"\n'
        '  c="tab\\there\\101" d="semi;colon = equals / slash"\n'
        '  e="";'
    )
    module = parse_login_module(text)
    assert module.options == {
        "a": 'single "quoted"',
        "b": 'with "escaped" quote and \\ backslash',
        "c": "tab\thereA",
        "d": "semi;colon = equals / slash",
        "e": "",
    }


def test_several_entries_parse_but_a_sasl_jaas_config_takes_one() -> None:
    text = f"{PLAIN_LOGIN_MODULE} required a=1; {SCRAM_LOGIN_MODULE} sufficient b=2;"
    assert [e.class_name for e in parse_jaas_config(text)] == [
        PLAIN_LOGIN_MODULE,
        SCRAM_LOGIN_MODULE,
    ]
    with pytest.raises(JaasConfigError, match="contains 2 login modules, should be 1"):
        parse_login_module(text)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "Login module not specified"),
        ("  // only a comment", "Login module not specified"),
        (PLAIN_LOGIN_MODULE, "control flag not specified"),
        (f"{PLAIN_LOGIN_MODULE} mandatory;", "Invalid login module control flag 'mandatory'"),
        (f'{PLAIN_LOGIN_MODULE} required password="{SECRET}"', "not terminated by semi-colon"),
        (f"{PLAIN_LOGIN_MODULE} required password=;", "Value not specified for key 'password'"),
        (f"{PLAIN_LOGIN_MODULE} required password;", "Value not specified for key 'password'"),
        (f'{PLAIN_LOGIN_MODULE} required password="{SECRET};', "never closed"),
        (f'{PLAIN_LOGIN_MODULE} required password="{SECRET}\n";', "never closed"),
        (f'{PLAIN_LOGIN_MODULE} required password="{SECRET}" password="x";', "twice"),
        (f'{PLAIN_LOGIN_MODULE} required "{SECRET}"=x;', "where an option name belongs"),
        (f'"{SECRET}" required;', "must start with a login module class name"),
        (f"{PLAIN_LOGIN_MODULE} required /* {SECRET}", "never closed"),
    ],
)
def test_errors_name_the_problem_never_the_value(text: str, problem: str) -> None:
    with pytest.raises(JaasConfigError, match=problem) as info:
        parse_login_module(text)
    assert SECRET not in str(info.value)


def test_wrong_login_module_for_the_mechanism() -> None:
    with pytest.raises(JaasConfigError, match="SCRAM-SHA-512 needs .*ScramLoginModule"):
        parse_login_module(
            f'{PLAIN_LOGIN_MODULE} required username="a" password="b";', mechanism="SCRAM-SHA-512"
        )


def test_repr_hides_option_values() -> None:
    module = parse_login_module(
        f'{PLAIN_LOGIN_MODULE} required username="admin" password="{SECRET}";'
    )
    for shown in (repr(module), str(module), repr(module.options), repr(dict(module.options))):
        assert SECRET not in shown
    assert "password" in repr(module)
    assert module.require("password") == SECRET
    with pytest.raises(JaasConfigError, match="lacks the option 'token'"):
        module.require("token")
