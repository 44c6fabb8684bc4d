"""One realistic sample of every credential shape the redaction knows, for every surface.

The tests of each surface (the run tools, titles, ``sessions show``/``search``, the
Markdown export, the web viewer) are parametrized over ``CREDENTIALS``, so a shape is
masked everywhere or the gap shows up by name. The samples are fake and assembled from
parts at run time, so no secret scanner mistakes this file for a leak; each has the
shape of the real thing. ``ORDINARY`` is text that must come through unchanged.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass


@dataclass(frozen=True)
class Credential:
    kind: str
    text: str
    """The credential as it would appear in a message, a file or a tool result."""
    secret: str
    """The part that must not be shown anywhere."""

    @property
    def id(self) -> str:
        return self.kind.replace(" ", "-")


def _j(*parts: str) -> str:
    return "".join(parts)


_ALNUM = "Q7x9Lm2Np4Rs6Tv8Wy0Za1Bc3De5Fg7Hj9Kk2Mn4Pq6"
_B64 = "Vb3Nw8Qk5Lz2Hy7Jt4Xr9Mf6Ps1Dc0Gw3Ea8Uo5Ki2Yn7Rb4Tm9Sj6Fh1Zq0Wv3Cx8Lg5="
_JWT = ".".join((_j("eyJ", "hbGciOiJIUzI1NiJ9"), _j("eyJ", "zdWIiOiIxMjM0NTY3ODkwIn0"),
                 "dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"))
_PEM_BODY = _j("MIIEowIBAAKCAQEA", _ALNUM, "\n", _ALNUM[::-1], "\n", _B64[:40])
_BASIC = base64.b64encode(b"admin:" + _ALNUM[:12].encode()).decode()
_PRIVATE = "PRIVATE " + "KEY"


def _armoured(label: str, body: str, *, headers: str = "") -> str:
    return _j("-----BEGIN ", label, _PRIVATE, "-----\n", headers, body, "\n-----END ",
              label, _PRIVATE, "-----")


_PGP_BODY = _j("lQOYBGXy", _B64[:44], "\n", _ALNUM, _B64[:20], "\n=Zx", "Qp")
_OPENSSH_BODY = _j("b3BlbnNzaC1rZXktdjEAAAAA", _ALNUM, "\n", _B64[8:60])
_AZURE_KEY = _j(_B64[:60], _ALNUM[:26], "==")
_SAS_SIG = _j("Xk3", "%2B", _ALNUM[:28], "%3D")
_TELEGRAM = _j("5831904726", ":", "AA", _ALNUM[:33])
_SENDGRID = _j("SG", ".", _ALNUM[:22], ".", _ALNUM[:20], _B64[:23])

CREDENTIALS: tuple[Credential, ...] = (
    Credential("openai key", _j("key sk", "-proj-", _ALNUM[:24]), _ALNUM[:24]),
    Credential("anthropic key", _j("sk", "-ant-api03-", _ALNUM[:30]), _ALNUM[:30]),
    Credential("aws access key id", _j("AKIA", "IOSFODNN7EXAMPLE"), "IOSFODNN7EXAMPLE"),
    Credential("aws secret key", _j("aws_secret_access_key = ", "wJalrXUtnFEMI/K7MDENG/",
                                    _ALNUM[:18]), "wJalrXUtnFEMI/K7MDENG/"),
    Credential("aws key pair", _j("my key is AKIA", "IOSFODNN7EXAMPLE and ",
                                  "wJalrXUtnFEMI/K7MDENG/", _ALNUM[:18]),
               "wJalrXUtnFEMI/K7MDENG/"),
    Credential("google api key", _j("AIza", "Sy", _ALNUM[:33]), _ALNUM[:33]),
    Credential("google oauth client secret", _j("GOCSPX", "-", _ALNUM[:28]), _ALNUM[:28]),
    Credential("stripe secret", _j("sk", "_live_", _ALNUM[:24]), _ALNUM[:24]),
    Credential("stripe restricted", _j("rk", "_test_", _ALNUM[:24]), _ALNUM[:24]),
    Credential("stripe webhook", _j("whsec", "_", _ALNUM[:32]), _ALNUM[:32]),
    Credential("github token", _j("gh", "p_", _ALNUM[:36]), _ALNUM[:36]),
    Credential("github fine-grained", _j("github", "_pat_", _ALNUM[:22], "_", _ALNUM[:20]),
               _ALNUM[:22]),
    Credential("gitlab token", _j("gl", "pat-", _ALNUM[:20]), _ALNUM[:20]),
    Credential("npm token", _j("np", "m_", _ALNUM[:36]), _ALNUM[:36]),
    Credential("hugging face", _j("h", "f_", _ALNUM[:34]), _ALNUM[:34]),
    Credential("slack token", _j("xo", "xb-", "1234567890-", _ALNUM[:24]), _ALNUM[:24]),
    Credential("slack webhook", _j("https://hooks.slack.com/services/", "T04QXAB12/",
                                   "B05RZCD34/", _ALNUM[5:29]), _ALNUM[5:29]),
    Credential("sendgrid key", _SENDGRID, _SENDGRID[3:]),
    Credential("telegram bot token", _j("https://api.telegram.org/bot", _TELEGRAM,
                                        "/getMe"), _TELEGRAM[13:]),
    Credential("jwt", f"session={_JWT}; path=/", _JWT.split(".")[2]),
    Credential("pem private key", _armoured("RSA ", _PEM_BODY), _ALNUM[::-1]),
    Credential("cut pem private key", _j("-----BEGIN ", _PRIVATE, "-----\n",
                                         _PEM_BODY[:60]), _PEM_BODY[16:50]),
    Credential("openssh private key", _armoured("OPENSSH ", _OPENSSH_BODY), _B64[8:60]),
    Credential("pgp private key", _armoured("PGP ", _PGP_BODY, headers="Version: x\n\n")
               .replace(_PRIVATE + "-----", _PRIVATE + " BLOCK-----"), _B64[:44]),
    Credential("azure connection string", _j(
        "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=", _AZURE_KEY,
        ";EndpointSuffix=core.windows.net"), _AZURE_KEY[:-2]),
    Credential("azure sas url", _j(
        "https://acme.blob.core.windows.net/c/f.txt?sv=2022-11-02&ss=b&srt=o&sp=r",
        "&se=2030-01-01T00:00:00Z&spr=https&sig=", _SAS_SIG), _SAS_SIG[3:]),
    Credential("postgres url", _j("postgresql://app:", "Sup3r-S3cret",
                                  "@db.example.com:5432/prod"), "Sup3r-S3cret"),
    Credential("redis url", _j("redis://:", "hunter2hunter2", "@cache:6379/0"),
               "hunter2hunter2"),
    Credential("basic auth header", _j("Authorization: Basic ", _BASIC), _BASIC),
    Credential("bearer header", _j("Authorization: Bearer ", _ALNUM[:20]), _ALNUM[:20]),
    Credential("basic auth alone", _j("curl -H 'x' --header Basic ", _BASIC), _BASIC),
    Credential("password setting", _j("DB_PASSWORD=", "correct-horse-9"), "correct-horse-9"),
    Credential("all-digit password", _j("password", "=", "80417359"), "80417359"),
    Credential("passphrase with spaces", _j("password", ": ", "correct horse battery staple"),
               "horse battery staple"),
    Credential("netrc one line", _j("machine api.example.com login alice password ",
                                    "Wq7-netrc-Pz3"), "Wq7-netrc-Pz3"),
    Credential("netrc lines", _j("machine git.example.com\n  login bob\n  password ",
                                 "Tr5-netrc-Kx9"), "Tr5-netrc-Kx9"),
    Credential("json secret", _j('{"client_secret": "', _ALNUM[:16], '"}'), _ALNUM[:16]),
)



def sample(kind: str) -> Credential:
    """The sample of one shape, by its ``kind``."""
    return next(c for c in CREDENTIALS if c.kind == kind)


ORDINARY: tuple[str, ...] = (
    "basic understanding of the codebase", "we spent 1200 input_tokens: 1234 here",
    "tokens: 12 in / 5 out", "https://example.com/path?q=1", "max_tokens=4096",
    "the password policy is documented", "see docs/secret-management.md",
    "password_min_length=12", "meet at 10:30 on the machine room floor",
    "https://hooks.example.com/services/status",
)
"""Text that looks a little like a credential and must be left as it is."""
