"""Masking credentials: the one place every stored, printed and shown text goes through.

The event log, the session index (titles, metadata), everything the human commands
print, the Markdown export, the web viewer and the files ``nonoka run``'s tools read pass
through here, so a key pasted into a message, echoed by an endpoint or read from a file
is masked the same way everywhere. Texts are redacted whole, never a line at a time: a
private key block spans many lines, and its body must go with its ``BEGIN`` line.

``FileRedaction`` is the same redaction for a file read in windows of lines: it also
judges the file by its name and its content (settings files, key files) and knows, from
the lines before a window, whether the window starts inside a key block. Standard
library only; the patterns are compiled on first use, so importing this costs nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

MASK = "[redacted]"
_MIN_SECRET = 8
"""Shorter environment values are not masked: they would blank out ordinary words."""
_SECRET_ENV_NAMES = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS", "PAT")
_PASSWORDS = r"password|passwd|passphrase|pass_phrase"
"""Settings whose value is a phrase: everything up to the end of the line is masked."""
_KEYWORDS = (r"api[_-]?key|access[_-]?key|account[_-]?key|private[_-]?key|secret|token|"
             r"credentials?|" + _PASSWORDS)
"""Names of settings that hold a secret (``Authorization`` has a pattern of its own)."""
_NAME = r"[a-z0-9_.-]{0,40}"
"""The rest of a setting's name around its keyword (``DB_`` in ``DB_PASSWORD``), bounded
so that a long run of name characters costs linear time, not quadratic."""
_SEPARATOR = r"(?:\\*\")?\s*[:=]\s*(?:\\*[\"'])?"
"""Between a setting's name and its value: ``=``, ``: "``, and the escaped quotes of JSON
inside JSON (``\\": \\"``, as tool-call arguments are logged)."""
_KEY_BLOCK = r"-----(BEGIN|END) ((?:[A-Z0-9]+ )*)PRIVATE KEY( BLOCK)?-----"
"""The armour lines of PEM, OpenSSH (``OPENSSH PRIVATE KEY``) and PGP (``PGP PRIVATE KEY
BLOCK``) private keys."""


def _with_lines(replacement: str) -> Callable[[re.Match[str]], str]:
    """``replacement``, then a masked line for each further line the replaced text
    spanned, so that the lines after a masked block stay where they were."""
    def substitute(match: re.Match[str]) -> str:
        text = match.expand(replacement)
        return text + ("\n" + MASK) * (match.group().count("\n") - text.count("\n"))
    return substitute


Gate = Callable[[str, str], bool]
"""Whether a pattern may match, from the text and its folded letters (``_fold``): false only when
it cannot, so that the pattern's scan (tens to hundreds of microseconds a text) is
skipped for the ordinary text that holds nothing like it."""

_FOLDED = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s"})
"""The letters ``(?i)`` matches to an ASCII letter that ``str.lower`` does not lower to it
(capital I with a dot, dotless i, long s; the Kelvin sign lowers to ``k`` by itself)."""


def _fold(text: str) -> str:
    """``text`` in lower case, with every letter that a ``(?i)`` pattern takes for an ASCII
    letter turned into that letter: a word a case-blind pattern can match is in it, at
    the same place (capital I with a dot is the one letter whose lower case is two)."""
    if not text.isascii() and ("\u0130" in text or "\u0131" in text or "\u017f" in text):
        text = text.translate(_FOLDED)
    return text.lower()


def _in_text(*words: str, every: bool = False) -> Gate:
    """Open when one of ``words`` (``every``: each of them) is in the text as it is."""
    need = all if every else any
    return lambda text, _folded: need(word in text for word in words)


def _in_folded(*words: str, every: bool = False) -> Gate:
    """Open when one of ``words`` (``every``: each) is in the text's folded letters."""
    need = all if every else any
    return lambda _text, lowered: need(word in lowered for word in words)


_TOKEN_STARTS = ("sk_", "rk_", "pk_", "whsec_", "sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
                 "github_pat_", "glpat-", "ATBB", "npm_", "pypi-", "hf_", "AKIA", "ASIA",
                 "AIza", "ya29.", "GOCSPX-", "xox", "xapp-", "SG.", "AGE-SECRET-KEY-1")
"""What each well-known token format starts with (but the bot tokens' digits)."""


def _token_gate(text: str, _folded: str) -> bool:
    if any(start in text for start in _TOKEN_STARTS):
        return True
    colon = text.find(":", 8)  # a bot token: eight digits or more, then a colon
    while colon >= 0:
        if text[colon - 8:colon].isdigit():
            return True
        colon = text.find(":", colon + 1)
    return False


_PASSWORD_SETTING = re.compile(r"(?i)[a-z_]{0,7}(?:\\*\")?[ \t]*[:=]")
"""What follows ``pass`` in a pass-word setting (``word``, ``phrase``...): the rest of
the keyword, then its separator."""
_SECRET_SETTING = re.compile(r"(?i)[a-z0-9_.-]{0,60}(?:\\*\")?\s*[:=]")
"""What follows a secret's keyword in a setting: the rest of its name (at most 48
characters: ``word`` of ``password``, then ``_`` and 40 more), then its separator."""


def _followed(text: str, lowered: str, word: str, rest: re.Pattern[str]) -> bool:
    """Whether ``word`` occurs in ``lowered`` with ``rest`` matching right after it in
    ``text`` (a word found in the folded text is at the same place in the text)."""
    at = lowered.find(word)
    while at >= 0:
        if rest.match(text, at + len(word)) is not None:
            return True
        at = lowered.find(word, at + 1)
    return False


def _password_gate(text: str, lowered: str) -> bool:
    return _followed(text, lowered, "pass", _PASSWORD_SETTING)


def _secret_gate(text: str, lowered: str) -> bool:
    return any(_followed(text, lowered, word, _SECRET_SETTING)
               for word in ("key", "secret", "token", "credential", "pass"))


@cache
def _patterns() -> tuple[tuple[re.Pattern[str], str, Gate], ...]:
    """``(pattern, replacement, gate)``, most specific first."""
    return (
        # Private key blocks: the whole block, or everything after BEGIN when it is cut;
        # a block masked already is left as it is (it has no END any more).
        (re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY( BLOCK)?-----"
                    r"(?!" + re.escape(MASK) + r")"
                    r"(?:.*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|.*)", re.S),
         r"-----BEGIN \1PRIVATE KEY\2-----" + MASK, _in_text("-----BEGIN ")),
        # PuTTY private keys: the lines after "Private-Lines: N".
        (re.compile(r"(Private-Lines:[ \t]*\d+)"
                    r"(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/=]+(?=[ \t]*(?:\r?\n|\Z)))+"),
         r"\1 " + MASK, _in_text("Private-Lines:")),
        # Authorization headers, whatever the scheme (Basic, Bearer, Token, Digest...).
        (re.compile(r"(?i)\b(authorization" + _SEPARATOR + r")"
                    r"(?:(?:basic|bearer|token|digest|apikey)\s+)?[^\s\"',}\\]+"),
         r"\1" + MASK, _in_folded("authorization")),
        (re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + MASK,
         _in_folded("bearer")),
        (re.compile(r"(?i)\b(basic)\s+(?=[A-Za-z0-9+/]*[0-9+/])[A-Za-z0-9+/]{12,}={0,2}"),
         r"\1 " + MASK, _in_folded("basic")),
        # Webhook URLs whose path is the secret.
        (re.compile(r"(?i)\b(https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)"
                    r"|(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks)/)"
                    r"[A-Za-z0-9/_-]+"), r"\1" + MASK, _in_folded("hooks.slack.com/", "discord")),
        # Passwords in URLs: scheme://user:password@host.
        (re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]{0,30}://[^\s:/@\"']*:)[^\s@/\"']+@"),
         r"\1" + MASK + "@", _in_text("://", "@", every=True)),
        # Azure: connection strings' keys and shared access signatures (sig=...).
        (re.compile(r"(?i)\b((?:AccountKey|SharedAccessKey|SharedAccessSignature)=)"
                    r"[^;\s\"']+"), r"\1" + MASK, _in_folded("accountkey=", "sharedaccess")),
        (re.compile(r"(?i)([?&;]sig=)[^&\s\"'<>]+"), r"\1" + MASK, _in_folded("sig=")),
        # JSON Web Tokens.
        (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), MASK,
         _in_text("eyJ")),
        # Well-known token formats: model providers, payments, forges, clouds, chat, mail
        # (the look-ahead, the first characters of them all, only makes the scan faster).
        (re.compile(r"(?=[srpwgAnhyGxS0-9])(?:\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}"
                    r"|\bwhsec_[A-Za-z0-9]{16,}"
                    r"|\bsk-[A-Za-z0-9_-]{8,}"
                    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
                    r"|\bglpat-[A-Za-z0-9_-]{20,}|\bATBB[A-Za-z0-9]{24,}"
                    r"|\bnpm_[A-Za-z0-9]{30,}|\bpypi-[A-Za-z0-9_-]{40,}|\bhf_[A-Za-z0-9]{30,}"
                    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bAIza[0-9A-Za-z_-]{35}"
                    r"|\bya29\.[0-9A-Za-z_-]{20,}|\bGOCSPX-[A-Za-z0-9_-]{20,}"
                    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}|\bxapp-[A-Za-z0-9-]{10,}"
                    r"|\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"
                    r"|(?<![0-9])[0-9]{8,10}:[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"
                    r"|\bAGE-SECRET-KEY-1[0-9A-Z]{50,})"), MASK, _token_gate),
        # .netrc: machine host login name password secret (on one line or several).
        (re.compile(r"(?i)(\bmachine[ \t]+\S+"
                    r"(?:\s+(?:login|account|port|protocol)[ \t]+\S+)*\s+password[ \t]+)\S+"),
         r"\1" + MASK, _in_folded("machine", "password", every=True)),
        # password: correct horse battery staple -- a phrase, to the end of its line or
        # its closing quote; all digits too.
        (re.compile(r"(?i)(?<![a-z0-9])(" + _NAME + r"(?:" + _PASSWORDS + r"))"
                    r"((?:\\*\")?[ \t]*[:=][ \t]*)"
                    r"(?:(\\*\")[^\n]{1,400}?\3|(\\*')[^\n]{1,400}?\4|[^\s\"'\\][^\n]*)"),
         r"\1\2\3\4" + MASK + r"\3\4", _password_gate),
        # NAME_API_KEY=value, "token": "...", aws_secret_access_key = ..., DB_PASSWORD: ...
        (re.compile(r"(?i)(?<![a-z0-9])(" + _NAME + r"(?:" + _KEYWORDS + r")"
                    r"(?:[_.-]" + _NAME + r")?)(" + _SEPARATOR + r")(?!\d+\b)"
                    r"(?:[^\s\"',}\\]|\\(?![\"\\])){4,}"),
         r"\1\2" + MASK, _secret_gate),
    )


_AWS_ID = r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"
_AWS_SECRET = (r"(?<![A-Za-z0-9/+])(?=[A-Za-z0-9/+]{0,39}[a-z])(?=[A-Za-z0-9/+]{0,39}[A-Z])"
               r"[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
"""An AWS secret access key: 40 characters of base64, upper and lower case (a hexadecimal
digest of the same length has no capitals). Alone it is any 40 characters; next to its
access key id (``AKIA...``, within ``_AWS_GAP``) it is the id's secret."""
_AWS_GAP = r"(.{0,200}?)"


@cache
def _pairs() -> tuple[tuple[re.Pattern[str], str], ...]:
    """Credentials known by what stands next to them: an AWS access key id and its secret
    access key, in either order. The id is left for ``_patterns`` (which mask it alone),
    so that it still pairs with a second secret."""
    return ((re.compile(f"({_AWS_ID}){_AWS_GAP}{_AWS_SECRET}", re.S), r"\1\2" + MASK),
            (re.compile(f"{_AWS_SECRET}{_AWS_GAP}({_AWS_ID})", re.S), MASK + r"\1\2"))


@cache
def _open_patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    """What may be the first part of a credential at the end of a text still growing (an
    answer being streamed): masked now, since the rest that would make ``_patterns``
    recognise it may never come, or come after this part is stored."""
    return (
        # A quoted pass-phrase whose closing quote has not come: to the end.
        (re.compile(r"(?i)(?<![a-z0-9])(" + _NAME + r"(?:" + _PASSWORDS + r"))"
                    r"((?:\\*\")?[ \t]*[:=][ \t]*)(\\*[\"'])[^\n\"']*\Z"),
         r"\1\2\3" + MASK),
        # The start of a token whose format ``_patterns`` knows only when it is whole.
        (re.compile(r"(?=[srpwgAnhyGxSe0-9])(?:\b(?:sk-|(?:sk|rk|pk)_(?:live|test)_|whsec_"
                    r"|gh[pousr]_|github_pat_|glpat-|ATBB|npm_|pypi-|hf_|AKIA|ASIA|AIza"
                    r"|ya29\.|GOCSPX-|xox[abposr]-|xapp-|SG\.|eyJ|AGE-SECRET-KEY-)"
                    r"[^\s\"'<>]*\Z|(?<![0-9])[0-9]{8,10}:[A-Za-z0-9_-]+\Z)"), MASK),
        # The start of an AWS secret access key after its id.
        (re.compile(f"({_AWS_ID}){_AWS_GAP}" r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{4,39}\Z",
                    re.S), r"\1\2" + MASK),
        # scheme://user:pass... before its ``@``.
        (re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]{0,30}://[^\s:/@\"']*:)[^\s@/\"']+\Z"),
         r"\1" + MASK),
    )


@cache
def _armour() -> re.Pattern[str]:
    return re.compile(_KEY_BLOCK)


@cache
def _key_names() -> re.Pattern[str]:
    return re.compile(r"(?i)(" + _KEYWORDS + r"|authorization)$")


_env_secrets: tuple[str, ...] | None = None


def _secret_env_values() -> tuple[str, ...]:
    """Values of this process's environment variables named like secrets, longest first.

    A key can reach the log in shapes no pattern foresees (an endpoint echoing it in an
    error, a tool printing its environment), so those values are masked exactly.
    """
    global _env_secrets
    if _env_secrets is None:
        found = {value for name, value in os.environ.items()
                 if name.upper().endswith(_SECRET_ENV_NAMES) and len(value) >= _MIN_SECRET}
        _env_secrets = tuple(sorted(found, key=len, reverse=True))
    return _env_secrets


def redact_text(text: str, *, keep_lines: bool = False, open_end: bool = False) -> str:
    """``text`` with every credential it recognises replaced by ``[redacted]``.

    The text is judged whole: a key block's body goes with its armour, a phrase with its
    ``password:``, an AWS secret access key with the id next to it. ``keep_lines``: a
    masked span that covered several lines leaves one mask per line, so line ``n`` of the
    result is what is left of line ``n`` of ``text``. ``open_end``: the text may go on
    (an answer being streamed, or one cut short), so what it ends in is masked too when
    it may be the first part of a credential (``sk-...``, an open quoted pass-phrase, the
    start of a secret environment value).
    """
    for secret in _secret_env_values():
        if secret in text:
            text = text.replace(secret, MASK + ("\n" + MASK) * secret.count("\n")
                                if keep_lines else MASK)
    if "AKIA" in text or "ASIA" in text:  # before the id alone is masked
        for pattern, replacement in _pairs():
            text = pattern.sub(_with_lines(replacement) if keep_lines else replacement, text)
    if open_end:
        text = _mask_open_end(text)
    return _mask_patterns(text, keep_lines=keep_lines)


def _mask_patterns(text: str, *, keep_lines: bool) -> str:
    """``text`` through every pattern whose gate lets it in."""
    lowered = _fold(text)
    for pattern, replacement, gate in _patterns():
        if gate(text, lowered):
            text, count = pattern.subn(_with_lines(replacement) if keep_lines else replacement,
                                       text)
            if count:
                lowered = _fold(text)
    return text


def _mask_open_end(text: str) -> str:
    """``text`` with what it ends in masked when it may be the first part of a
    credential (``_open_patterns``, the start of a secret environment value)."""
    for secret in _secret_env_values():
        start = max(0, len(text) - len(secret) + 1)
        while (start := text.find(secret[:4], start)) >= 0:
            if secret.startswith(text[start:]):
                text = text[:start] + MASK
                break
            start += 1
    for pattern, replacement in _open_patterns():
        text = pattern.sub(replacement, text, count=1)
    return text


def redact(value: Any) -> Any:
    """Replace API keys, tokens and passwords anywhere in a JSON-like value; a mapping's
    value whose key is named like a secret is masked whole."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        names = _key_names()
        return {k: MASK if isinstance(k, str) and names.search(k) and isinstance(v, str)
                else redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


SETTLE_LINE = 2048
"""How much of an unfinished last line ``settled`` holds back at most."""
SETTLE_BLOCK = 65536
"""How much of an open private key block ``settled`` holds back at most."""


def settled(text: str) -> int:
    """Where a text that is still growing (an answer being streamed) may be cut, the part
    before it masked for good: no credential ``redact_text`` knows is cut in two at that
    point (the journal also checks that masking the rest alone gives the same).

    Every pattern ends at the end of a line except private key blocks (PEM and PGP
    armour, PuTTY's private lines), so the cut is after the last line break, before a
    block whose end has not come yet; a last line longer than ``SETTLE_LINE`` is cut at
    its last space (a token never holds one), and a block is held back for
    ``SETTLE_BLOCK`` characters at most."""
    cut = text.rfind("\n") + 1
    if len(text) - cut > SETTLE_LINE:
        cut = max(cut, text.rfind(" ") + 1, text.rfind("\t") + 1)
    for start, end in _BLOCKS:
        opened = text.rfind(start)
        if opened >= 0 and len(text) - opened <= SETTLE_BLOCK \
                and text.find(end, opened) < 0:
            cut = min(cut, opened)
    return cut


_BLOCKS = (("-----BEGIN ", "-----END "), ("Private-Lines:", "Private-MAC:"))
"""Where the multi-line secrets ``redact_text`` masks start, and where they end."""


# -- files ---------------------------------------------------------------------------------

_ENV_LINE = re.compile(r"^(\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_.-]*\s*[=:]\s*)(.*)$")
_ENV_ASSIGNMENT = re.compile(r"(?:export\s+)?[A-Z_][A-Z0-9_]*=")
"""A line of a shell environment file, whatever the file is called: ``NAME=value``."""
_ENV_NAME = re.compile(r"\.env(?:rc)?(?:[._-].*)?|.+[._-]env|.+\.env[._-].*|\.flaskenv")
_KEY_FILE = re.compile(r"id_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?|.+\.(?:ppk|key|p8|pk8)")
_PUTTY = "PuTTY-User-Key-File-"
_TAIL = 64
"""Characters of a long line's previous piece looked at again with the next piece, so
that an armour line cut between two pieces is still seen."""

PLAIN, SETTINGS, KEY, PGPASS, NETRC = "plain", "settings", "key", "pgpass", "netrc"


def is_env_file(name: str) -> bool:
    """``.env``, ``.env.local``, ``.env_prod``, ``.env-local``, ``prod.env``, ``.envrc``:
    files that hold ``NAME=value`` settings, usually secrets."""
    return _ENV_NAME.fullmatch(name.lower()) is not None


def mask_env_line(line: str) -> str:
    """``NAME=value`` with the value masked (comments and blank lines kept)."""
    match = _ENV_LINE.match(line)
    if match is None or not match.group(2).strip() or line.lstrip().startswith("#"):
        return line
    return match.group(1) + MASK


def _mask_pgpass_line(line: str) -> str:
    """``host:port:database:user:password``: the password masked."""
    fields = re.match(r"((?:(?:[^:\\]|\\.)*:){4})(.+)", line)
    return line if fields is None or line.lstrip().startswith("#") else fields.group(1) + MASK


def _mask_netrc_line(line: str) -> str:
    return re.sub(r"(?i)\b(password|passwd)(\s+)\S+", r"\1\2" + MASK, line)


_LINE_RULES: dict[str, Callable[[str], str]] = {
    SETTINGS: mask_env_line, PGPASS: _mask_pgpass_line, NETRC: _mask_netrc_line}


def kind_of_name(name: str) -> str:
    """What a file's name says it holds: ``settings`` (``.env``...), ``key`` (``id_rsa``,
    ``*.key``, ``*.ppk``), ``pgpass``, ``netrc`` or ``plain``."""
    lowered = name.lower()
    if is_env_file(lowered):
        return SETTINGS
    if _KEY_FILE.fullmatch(lowered):
        return KEY
    if lowered == ".pgpass":
        return PGPASS
    if lowered in (".netrc", "_netrc"):
        return NETRC
    return PLAIN


class FileRedaction:
    """The redaction of one file shown a window of lines at a time.

    Feed every line in order to ``see`` (a long line may come in pieces): that is how a
    window is known to start inside a key block whose ``BEGIN`` came before it, and how
    a file is recognised by its content (only ``NAME=value`` lines: a settings file
    whatever its name; a PuTTY key). ``lines`` then masks any run of consecutive lines.
    """

    def __init__(self, name: str) -> None:
        self._named = kind_of_name(name)
        self._inside = False
        self._tail = ""
        self._first = True
        self._putty = False
        self._assignments = 0
        self._other = 0

    def see(self, text: str, *, continued: bool = False) -> bool:
        """Note the next line (or, ``continued``, the next piece of the current one);
        whether the line starts inside a private key block."""
        started = self._inside
        probe = self._tail + text if continued else text
        if not continued:
            self._judge(text)
        if "-----" in probe:
            for marker in _armour().finditer(probe):
                self._inside = marker.group(1) == "BEGIN"
        self._tail = probe[-_TAIL:]
        return started

    def _judge(self, line: str) -> None:
        """Count the line towards what the file is (only lines that can still matter)."""
        if self._first:
            self._first = False
            self._putty = line.startswith(_PUTTY)
        if self._other:
            return  # not a settings file: one other line is enough
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            return
        if _ENV_ASSIGNMENT.match(stripped):
            self._assignments += 1
        else:
            self._other += 1

    @property
    def kind(self) -> str:
        """What the file holds, by its name, else by the lines seen so far."""
        if self._named != PLAIN:
            return self._named
        if self._putty:
            return KEY
        return SETTINGS if self._assignments and not self._other else PLAIN

    def lines(self, lines: Sequence[str], *, inside: bool = False) -> list[str]:
        """``lines`` (consecutive, without line breaks) as they may be shown, one for
        one; ``inside``: the first of them starts inside a key block (``see`` said so)."""
        kind = self.kind
        if kind == KEY:
            return [MASK if line.strip() else line for line in lines]
        out = list(lines)
        if inside:  # the block's BEGIN came before these lines: mask up to its END
            for i, line in enumerate(out):
                end = next((m for m in _armour().finditer(line) if m.group(1) == "END"), None)
                if end is not None:
                    out[i] = MASK + line[end.end():]
                    break
                out[i] = MASK
        rule = _LINE_RULES.get(kind)
        if rule is not None:
            out = [rule(line) for line in out]
        return redact_text("\n".join(out), keep_lines=True).split("\n")
