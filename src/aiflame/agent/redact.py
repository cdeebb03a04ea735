"""Command lines made safe to leave the host: credentials redacted, one line.

A command line is never a label by default (``[labels] command = false``): it is unbounded
(one series per invocation) and it carries secrets (``--db-password=...``). Where an
operator turns it on, :func:`redact_command` replaces what looks like a credential with
``<redacted>`` before the value is used anywhere. It reads the command line word by word
(a program that rewrites its own title, as ``setproctitle`` and ``exec -a`` do, has all
its words in one argument):

* the value of an option or assignment whose name says it holds one
  (``--db-password=x``, ``--api-key x``, ``-Djavax.net.ssl.keyStorePassword=x``,
  ``AWS_SECRET_ACCESS_KEY=x``, ``--token x``, ``password:x``): names are split into words
  (``-``, ``_``, ``.``, camelCase) and matched against :data:`SECRET_WORDS`, or contain
  ``password``, ``passwd``, ``secret``, ``token``, ``apikey`` or ``credential`` anywhere
  (``--dbpassword``), or are Redis's ``--requirepass``/``--masterauth``; the bare words
  ``password``, ``passwd``, ``token`` or ``secret`` hide the word after them;
* the user information of a URL (``postgresql://app:pw@db:5432/x`` ->
  ``postgresql://<redacted>@db:5432/x``), wherever it is in a word;
* HTTP credentials (``Authorization: Bearer x``, ``Basic x``) and ``user:password`` given
  to ``-u``/``--user`` (curl, wget);
* tokens in the well-known formats of their issuers, wherever they appear (GitHub
  ``ghp_``, Hugging Face ``hf_``, GitLab ``glpat-``, Slack ``xox?-``, OpenAI ``sk-``,
  AWS access key ids ``AKIA...``, JSON Web Tokens ``eyJ...``).

The result is one line (control characters become spaces) and is cut to the label limit by
the caller. What is redacted errs on the side of too much: a ``--key-file`` path is lost
with the secrets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

REDACTED = "<redacted>"
SECRET_WORDS = frozenset(
    {
        "password", "passwd", "pass", "pwd", "pw", "passphrase", "secret", "secrets",
        "token", "tokens", "key", "apikey", "credential", "credentials", "creds", "auth",
        "authorization", "cookie", "signature", "sig", "private", "privatekey", "bearer",
    }
)  # fmt: skip
_ANYWHERE = ("password", "passwd", "secret", "token", "apikey", "credential", "requirepass",
             "masterauth", "dbpass")  # fmt: skip
_BARE = frozenset({"password", "passwd", "token", "secret"})  # `kafka password 1234`
_ASSIGNMENT = re.compile(r"^(-{0,2}[A-Za-z_][\w.\-]*?)([=:])(.*)$", re.DOTALL)
_OPTION = re.compile(r"^--?[A-Za-z][\w.\-]*$")
_URL_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://)([^/@\s]+)@")
_HTTP_AUTH = re.compile(
    r"\b((?:Proxy-)?Authorization:\s*(?:Bearer|Basic|Token|Digest)?|Bearer)(\s*)\S+", re.IGNORECASE
)
_KNOWN_TOKENS = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}"
    r"|glpat-[A-Za-z0-9_\-]{20,}|xox[abposr]-[A-Za-z0-9\-]{10,}|sk-[A-Za-z0-9_\-]{20,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]+)"
)
_USER_OPTIONS = frozenset({"-u", "--user", "--proxy-user", "--http-user"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORDS = re.compile(r"(\s+)")


def secret_name(name: str) -> bool:
    """Whether an option or variable named ``name`` holds a credential."""
    bare = name.lstrip("-")
    if bare[:1] == "D" and "." in bare:  # -Dsome.java.property
        bare = bare[1:]
    lower = bare.lower().replace("-", "").replace("_", "").replace(".", "")
    if any(w in lower for w in _ANYWHERE):
        return True
    words = re.split(r"[-_.]+", _CAMEL.sub("_", bare))
    return any(w.lower() in SECRET_WORDS for w in words if w)


def redact_text(text: str) -> str:
    """Secrets recognisable in any text: URL user information, HTTP credentials, tokens of
    known formats."""
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _HTTP_AUTH.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return _KNOWN_TOKENS.sub(REDACTED, text)


def _hides_next(word: str) -> bool:
    """A word after which the next one is a credential (``--token x``, ``password x``)."""
    return bool(_OPTION.match(word) and secret_name(word)) or word.lower() in _BARE


def redact_words(words: Sequence[str]) -> list[str]:
    """``words`` (of a command line) with every credential replaced by ``<redacted>``."""
    out: list[str] = []
    hide_next = False
    for word in words:
        if hide_next:
            hide_next = False
            if not word.startswith("-") or word == "-":
                out.append(REDACTED)
                continue
        assignment = _ASSIGNMENT.match(word)
        if assignment and secret_name(assignment.group(1)) and assignment.group(3):
            out.append(f"{assignment.group(1)}{assignment.group(2)}{REDACTED}")
            continue
        if assignment and assignment.group(1) in _USER_OPTIONS and ":" in assignment.group(3):
            user = assignment.group(3).split(":", 1)[0]
            out.append(f"{assignment.group(1)}={user}:{REDACTED}")
            continue
        if _hides_next(word):
            out.append(word)
            hide_next = True
            continue
        if out and out[-1] in _USER_OPTIONS and ":" in word:
            out.append(f"{word.split(':', 1)[0]}:{REDACTED}")
            continue
        out.append(word)
    return out


def single_line(value: str) -> str:
    """``value`` on one line: runs of control characters (newlines, tabs, escapes) become
    one space."""
    return _CONTROL.sub(" ", value).strip()


def redact_command(argv: Sequence[str]) -> str:
    """The command line of ``argv`` as a label value may carry it: redacted, one line."""
    text = redact_text(single_line(" ".join(a for a in argv if a)))
    parts = _WORDS.split(text)  # words at even places, the spaces between at odd ones
    words = redact_words(parts[0::2])
    parts[0::2] = words
    return "".join(parts)
