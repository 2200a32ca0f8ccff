"""A small reader of bash launch scripts: no shell is executed.

It joins ``\\`` continuations, drops comments, keeps the variables the script assigns
(``VAR=value``, ``export``, ``readonly``, ``declare``, bash arrays ``A=( ... )``, here-documents
read into a variable: ``read -r -d '' VAR <<EOF``, ``VAR=$(cat <<EOF ...)``), expands ``$VAR``,
``${VAR}``, ``${VAR:-default}``, ``${VAR:=default}``, ``${A[@]}``, ``${#A[@]}`` and integer
``$((...))`` arithmetic, and splits the script into simple commands (``;``, ``&&``, ``||``,
``|``, ``&`` and new lines separate them; redirections are dropped). What it cannot know is left
as a placeholder (``$1``, ``${SLURM_NNODES}``, ``$(hostname)``) and listed in
:attr:`Script.unresolved`.

Control flow is not run. Its rules (bash semantics where the script's intent is the default
branch): an assignment inside ``if``/``case`` applies only when the variable has no value yet
(``if [ "$ZERO_STAGE" == "" ]; then ZERO_STAGE=3; fi`` after ``ZERO_STAGE=$2``); ``for X in a b``
sets ``X`` to the first item (:attr:`Script.loops` names the others); ``IFS=, read -r A B <<<
"$v"`` splits ``v``; ``source FILE`` reads ``FILE`` (next to the script) when it exists.
"""

from __future__ import annotations

import ast
import operator
import os
import re
import shlex
from typing import Optional

from attrs import define, field

from fmest.configs._base import DATA as DATA_
from fmest.configs._base import HYPERPARAM as HYPERPARAM_
from fmest.configs._base import LOGGING as LOGGING_
from fmest.configs._base import Sink

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=")
_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
_OPEN = {"if", "case", "while", "until", "for", "select"}
_CLOSE = {"fi", "esac", "done"}
_LEAD = {"then", "else", "elif", "do", "{", "}", "!", "function", "in"}
_DECLARE = {"export", "readonly", "declare", "local", "typeset"}


@define
class Field:
    """One word after expansion: its text and the shell variables it came from."""

    text: str
    vars: tuple = ()

    @property
    def unresolved(self) -> bool:
        return PLACEHOLDER.search(self.text) is not None


#: what a value the script does not set looks like after expansion
PLACEHOLDER = re.compile(r"\$(\{[^}]*\}|\([^)]*\)*|[A-Za-z_0-9@*#?]+)")


@define
class Command:
    """A simple command: environment prefix (``A=1 B=2 cmd``), its words and the line."""

    env: dict
    words: list
    line: int
    source: str   # the file it came from (a sourced file differs from the script)


@define
class Script:
    commands: list = field(factory=list)
    variables: dict = field(factory=dict)
    #: ``(placeholder, line)`` of every value the script leaves to its caller or environment
    unresolved: list = field(factory=list)
    #: loops that run several configurations: ``"for X in a b (line N): first item used"``
    loops: list = field(factory=list)
    #: ``#SBATCH`` options: name -> value (``--nodes``, ``-N``, ``--gpus-per-node``, ...)
    sbatch: dict = field(factory=dict)


# -- here-documents and continuation lines --------------------------------------------------
def _heredocs(text: str) -> str:
    """Rewrite here-documents: one read into a variable becomes an assignment; any other (a
    file written with ``cat > f <<EOF``, stdin of a program) has its body dropped."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _HEREDOC.search(line) if "<<<" not in line else None
        if m is None:
            out.append(line)
            i += 1
            continue
        strip_tabs, quoted, delim = m.group(1) == "-", bool(m.group(2)), m.group(3)
        body: list[str] = []
        j = i + 1
        while j < len(lines) and (lines[j].lstrip("\t") if strip_tabs else lines[j]).strip() \
                != delim:
            body.append(lines[j].lstrip("\t") if strip_tabs else lines[j])
            j += 1
        rest_after = lines[j + 1] if j + 1 < len(lines) else ""
        content = "\n".join(body)
        read = re.match(r"\s*read\b(?:\s+-[a-z]+(?:\s+(?:''|\"\"))?)*\s+([A-Za-z_]\w*)\s*<<",
                        line)
        cat = re.match(r"\s*(?:export\s+)?([A-Za-z_]\w*)=[\"']?\$\(\s*cat\s*<<", line)
        found = read or cat
        name = found.group(1) if found is not None else None
        if name is not None:
            if quoted:
                value = "'" + content.replace("'", "'\\''") + "'"
            else:
                value = '"' + content.replace('"', '\\"') + '"'
            out.append(f"{name}={value}")
            out.extend([""] * len(body))
            if cat and rest_after.strip().strip("\"'") == ")":
                j += 1
                out.append("")
        else:
            out.append(line[:m.start()] + line[m.end():])
            out.extend([""] * len(body))
        out.append("")
        i = j + 1
    return "\n".join(out)


# -- words -------------------------------------------------------------------------------
def _match(text: str, i: int, open_: str, close: str) -> int:
    """Index after the ``close`` matching ``open_`` at ``text[i-1]`` (quotes respected)."""
    depth = 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            end = text.find("'", i + 1)
            i = (end if end >= 0 else len(text) - 1) + 1
            continue
        if c == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def _parts(text: str, i: int, stop) -> tuple[list, int]:
    """Parse one word from ``text[i]`` until ``stop(c)`` (outside quotes): a list of parts
    ``(kind, text, quoted)`` with kind ``lit``, ``var`` (inside of ``${}`` or a name),
    ``arith`` or ``cmd``."""
    parts: list = []
    quoted = False
    while i < len(text):
        c = text[i]
        if not quoted and stop(c):
            break
        if c == "\\":
            if i + 1 < len(text) and text[i + 1] == "\n":
                i += 2
                continue
            nxt = text[i + 1] if i + 1 < len(text) else ""
            if quoted and nxt not in '$`"\\':
                parts.append(("lit", "\\" + nxt, True))
            else:
                parts.append(("lit", nxt, quoted))
            i += 2
        elif c == "'" and not quoted:
            end = text.find("'", i + 1)
            end = len(text) if end < 0 else end
            parts.append(("lit", text[i + 1:end], True))
            i = end + 1
        elif c == '"':
            quoted = not quoted
            parts.append(("lit", "", True))
            i += 1
        elif c == "$" and text.startswith("$'", i) and not quoted:
            end = text.find("'", i + 2)
            end = len(text) if end < 0 else end
            raw = text[i + 2:end]
            try:
                raw = raw.encode("latin-1", "backslashreplace").decode("unicode_escape")
            except UnicodeDecodeError:
                pass
            parts.append(("lit", raw, True))
            i = end + 1
        elif c == "$" and text.startswith("$((", i):
            end = _match(text, i + 3, "(", ")")
            end = _match(text, end, "(", ")") if text[end - 1:end] == ")" and \
                text[end:end + 1] == ")" else end
            parts.append(("arith", text[i + 3:end - 2], quoted))
            i = end
        elif c == "$" and text.startswith("$(", i):
            end = _match(text, i + 2, "(", ")")
            parts.append(("cmd", text[i:end], quoted))
            i = end
        elif c == "$" and text.startswith("${", i):
            end = _match(text, i + 2, "{", "}")
            parts.append(("var", text[i + 2:end - 1], quoted))
            i = end
        elif c == "$" and i + 1 < len(text) and (text[i + 1].isalnum() or text[i + 1] in "_@*#?$!"):
            m = _NAME.match(text, i + 1)
            name = m.group(0) if m else text[i + 1]
            parts.append(("var", name, quoted))
            i += 1 + len(name)
        elif c == "`":
            end = text.find("`", i + 1)
            end = len(text) if end < 0 else end
            parts.append(("cmd", text[i:end + 1], quoted))
            i = end + 1
        else:
            parts.append(("lit", c, quoted))
            i += 1
    return parts, i


# -- the lexer: simple commands ---------------------------------------------------------
_SEPARATORS = "\n;&|()"


def _lex(text: str) -> list[tuple[int, list]]:
    """``(line, items)`` per simple command; items are words (lists of parts), ``("array",
    name, plus, [words])`` assignments, and ``("redir", op)`` markers."""
    commands: list[tuple[int, list]] = []
    items: list = []
    line = 1
    i = 0
    start_line = 1

    def end() -> None:
        nonlocal items
        if items:
            commands.append((start_line, items))
        items = []

    word_stop = lambda c: c in " \t\n;&|()<>"  # noqa: E731
    while i < len(text):
        c = text[i]
        if c in " \t\r":
            i += 1
        elif c == "\\" and text.startswith("\\\n", i):
            i += 2
            line += 1
        elif c == "#":
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl
        elif c in _SEPARATORS:
            if c == "\n":
                line += 1
            end()
            i += 2 if text.startswith(("&&", "||", ";;"), i) else 1
            if c == "|" and text.startswith("|&", i - 1):
                i += 1
        elif c == "<" and (m := re.match(r"<[A-Za-z][^<>\n]*>(?=[\s;]|$)", text[i:])):
            # <describe the value>: a template's placeholder, not a redirection (the lookahead
            # is zero-width: group(0) and end() are those of the placeholder itself)
            if not items:
                start_line = line
            items.append([("var", m.group(0), True)])
            i += m.end()
        elif c in "<>" or text.startswith("&>", i):
            m = re.match(r"&>>?|>>?&?|<<<|<&|<>|<", text[i:])
            op = m.group(0) if m is not None else c   # always matches: "<", ">" or "&>" here
            i += len(op)
            items.append(("redir", op))
        else:
            if not items:
                start_line = line
            m = _ASSIGN.match(text, i)
            if m and text.startswith("(", m.end()):
                # NAME=( words ... ): new lines are blanks, comments run to the line's end
                j = m.end() + 1
                words: list = []
                while j < len(text):
                    ch = text[j]
                    if ch in " \t\r\n":
                        line += ch == "\n"
                        j += 1
                    elif ch == "\\" and text.startswith("\\\n", j):
                        j += 2
                        line += 1
                    elif ch == "#":
                        nl = text.find("\n", j)
                        j = len(text) if nl < 0 else nl
                    elif ch == ")":
                        j += 1
                        break
                    else:
                        parts, j2 = _parts(text, j, lambda ch2: ch2 in " \t\r\n)")
                        line += text.count("\n", j, j2)
                        words.append(parts)
                        j = max(j2, j + 1)
                items.append(("array", m.group(1), m.group(3) == "+", words))
                i = j
                continue
            parts, j = _parts(text, i, word_stop)
            if text.startswith("<", j) and text[i:j].endswith("="):
                # NAME=<describe the value>: a template's placeholder, not a redirection
                close = text.find(">", j)
                nl = text.find("\n", j)
                if close > 0 and (nl < 0 or close < nl):
                    parts = [*parts, ("var", text[j:close + 1], True)]   # left unresolved
                    j = close + 1
            line += text.count("\n", i, j)
            if items and items[-1] == ("redir", "<<<"):
                items.append(("herestring", parts))
            elif items and isinstance(items[-1], tuple) and items[-1][0] == "redir":
                items.pop()   # the redirection's target
                items.append(("redir-done", ""))
            elif parts and all(p[0] == "lit" and not p[2] and p[1].isdigit() for p in parts) \
                    and j < len(text) and text[j] in "<>":
                pass   # a file descriptor: 2>&1
            else:
                items.append(parts)
            i = max(j, i + 1)
    end()
    return commands


# -- expansion --------------------------------------------------------------------------
_ARITH_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def _arith(expr: str) -> Optional[int]:
    expr = expr.replace("/", "//").replace("**", "^^").replace("^^", "**")
    try:
        tree = ast.parse(expr.strip(), mode="eval").body
    except SyntaxError:
        return None

    def ev(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and right == 0:
                raise ValueError
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ValueError
            return _ARITH_OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError

    try:
        return ev(tree)
    except (ValueError, RecursionError):
        return None


_ATOM = re.compile(r"`[^`]*`|\$\([^()]*(?:\([^()]*\)[^()]*)*\)|\$\{[^}]*\}")


def _split(text: str) -> list[str]:
    """Field splitting of an unquoted value (quotes in it honoured as ``shlex`` does; a
    placeholder such as ``$(date +%s)`` stays one word)."""
    if not text.strip():
        return []
    atoms: list[str] = []

    def hide(m: re.Match) -> str:
        atoms.append(m.group(0))
        return f"\x00{len(atoms) - 1}\x00"

    hidden = _ATOM.sub(hide, text)
    try:
        pieces = shlex.split(hidden)
    except ValueError:
        pieces = hidden.split()
    return [re.sub("\x00(\\d+)\x00", lambda m: atoms[int(m.group(1))], p) for p in pieces]


class _Shell:
    def __init__(self, path: str, sbatch: dict, depth: int = 0) -> None:
        self.path = path
        self.vars: dict[str, Field | list[Field]] = {}
        self.script = Script(sbatch=sbatch)
        self.depth = depth

    # values ---------------------------------------------------------------------------
    def _unresolved(self, text: str, line: int) -> None:
        if (text, line) not in self.script.unresolved:
            self.script.unresolved.append((text, line))

    def _scalar(self, name: str) -> Optional[Field]:
        value = self.vars.get(name)
        if isinstance(value, list):
            return value[0] if value else Field("")
        return value

    def _var(self, expr: str, line: int) -> Optional[list[Field]]:
        """The fields of ``${expr}``; None when the script does not set it."""
        m = re.fullmatch(r"#([A-Za-z_]\w*)(\[[@*]\])?", expr)
        if m:
            value = self.vars.get(m.group(1))
            if value is None:
                return None
            n = len(value) if isinstance(value, list) else len(value.text)
            return [Field(str(n), (m.group(1),))]
        m = re.fullmatch(r"([A-Za-z_]\w*)\[([^\]]*)\]", expr)
        if m:
            value = self.vars.get(m.group(1))
            if value is None:
                return None
            items = value if isinstance(value, list) else [value]
            idx = m.group(2)
            if idx in ("@", "*"):
                return [Field(f.text, (*f.vars, m.group(1))) for f in items]
            k = _arith(self._expand_text(idx, line)) if idx else 0
            if k is None or not -len(items) <= k < len(items):
                return None
            return [Field(items[k].text, (*items[k].vars, m.group(1)))]
        m = re.fullmatch(r"([A-Za-z_]\w*|\d+)(:?[-=+?])(.*)", expr, re.S)
        if m:
            name, op, word = m.groups()
            cur = self._scalar(name)
            empty = cur is None or (op.startswith(":") and cur.text == "")
            if op.endswith("+"):
                return [Field("")] if empty else self._word_fields(word, line, True)
            if not empty and cur is not None:   # not empty implies cur is set
                return [Field(cur.text, (*cur.vars, name))]
            if op.endswith("?"):
                return None
            fields = self._word_fields(word, line, True)
            if op.endswith("="):
                self.vars[name] = Field(" ".join(f.text for f in fields), (name,))
            return [Field(f.text, (*f.vars, name)) for f in fields]
        if _NAME.fullmatch(expr) or expr.isdigit():
            cur = self._scalar(expr)
            if cur is None:
                return None
            value = self.vars[expr]
            if isinstance(value, list):
                return [Field(value[0].text, (*value[0].vars, expr))] if value else [Field("")]
            return [Field(cur.text, (*cur.vars, expr))]
        return None

    def _expand_text(self, text: str, line: int) -> str:
        return " ".join(f.text for f in self._word_fields(text, line, True))

    def _word_fields(self, text: str, line: int, quoted: bool) -> list[Field]:
        parts, _ = _parts(text, 0, lambda c: False)
        if quoted:
            parts = [(k, t, True) for k, t, _q in parts]
        return self.expand(parts, line)

    def expand(self, parts: list, line: int) -> list[Field]:
        """A word's fields: unquoted expansions split on blanks (bash field splitting, with
        quotes inside a value honoured as ``shlex`` does), ``"${A[@]}"`` one field per item."""
        fields: list[Field] = [Field("")]
        have_word = False
        for kind, text, quoted in parts:
            if kind == "lit":
                fields[-1] = Field(fields[-1].text + text, fields[-1].vars)
                have_word = have_word or quoted or bool(text)
                continue
            if kind == "arith":
                value = _arith(self._arith_subst(text, line))
                got = [Field(str(value))] if value is not None else None
                placeholder = f"$(({text}))"
            elif kind == "cmd":
                got, placeholder = self._cmd(text), text
            else:
                got = self._var(text, line)
                placeholder = f"${text}" if _NAME.fullmatch(text) or text.isdigit() \
                    else f"${{{text}}}"
            unset = got is None
            if got is None:
                self._unresolved(placeholder, line)
                got = [Field(placeholder)]
            multi = len(got) > 1
            for n, f in enumerate(got):
                if not quoted and not unset:   # a placeholder stays one word
                    pieces = _split(f.text)
                else:
                    pieces = [f.text]
                if n > 0 and multi:
                    fields.append(Field("", ()))
                for k, piece in enumerate(pieces):
                    if k > 0:
                        fields.append(Field("", ()))
                    last = fields[-1]
                    fields[-1] = Field(last.text + piece, tuple(dict.fromkeys(
                        (*last.vars, *f.vars))))
                    have_word = True
                if quoted and not pieces:
                    have_word = True
        if not have_word and fields == [Field("")]:
            return []
        return [f for f in fields if f.text != "" or have_word]

    def _cmd(self, text: str) -> Optional[list[Field]]:
        """``$(pwd)`` and ``$(cd "$(dirname "$0")" && pwd)``-style substitutions: the folder
        of the script (the scripts run from there); any other command is not run."""
        inner = text[2:-1] if text.startswith("$(") else text[1:-1]
        inner = inner.strip()
        if inner == "pwd" or ("dirname" in inner and ("$0" in inner or "BASH_SOURCE" in inner)
                              and ("pwd" in inner or inner.startswith("dirname"))):
            return [Field(os.path.dirname(os.path.abspath(self.path)))]
        return None

    def _arith_subst(self, expr: str, line: int) -> str:
        def sub(m: re.Match) -> str:
            name = m.group(1) or m.group(2) or m.group(3)
            cur = self._scalar(name)
            if cur is None:
                return "x"
            return f"({cur.text})" if re.fullmatch(r"\s*-?\d+\s*", cur.text) else "x"
        return re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*|\d)|\b([A-Za-z_]\w*)\b", sub, expr)

    # commands -------------------------------------------------------------------------
    def run(self, text: str) -> Script:
        cond = 0
        for line, items in _lex(_heredocs(text)):
            herestring = next((it[1] for it in items
                               if isinstance(it, tuple) and it[0] == "herestring"), None)
            items = [it for it in items if not (isinstance(it, tuple) and it[0] in (
                "redir-done", "redir", "herestring"))]
            # leading keywords
            while items and isinstance(items[0], list):
                head = "".join(t for _k, t, _q in items[0]) if all(
                    p[0] == "lit" for p in items[0]) else None
                if head in _OPEN:
                    if head == "for":
                        self._for(items, line)
                        items = []
                        break
                    if head in ("if", "case"):
                        cond += 1
                    items = []   # the condition itself runs nothing we read
                    break
                if head in _CLOSE:
                    cond -= head in ("fi", "esac")
                    items = items[1:]
                    continue
                if head in _LEAD or head == "elif":
                    items = items[1:] if head != "elif" else []
                    continue
                break
            if items:
                self._command(items, line, cond > 0, herestring)
        self.script.variables = self.vars
        return self.script

    def _for(self, items: list, line: int) -> None:
        if len(items) < 2 or not isinstance(items[1], list):
            return
        name = "".join(t for _k, t, _q in items[1])
        values: list[Field] = []
        if len(items) > 3 and items[2] == [("lit", "in", False)] or (
                len(items) > 3 and "".join(t for _k, t, _q in items[2]) == "in"):
            for w in items[3:]:
                if isinstance(w, list):
                    values.extend(self.expand(w, line))
        if values and _NAME.fullmatch(name):
            self.vars[name] = Field(values[0].text, values[0].vars)
            if len(values) > 1:
                self.script.loops.append(
                    f"line {line}: for {name} in {' '.join(v.text for v in values)}: only the "
                    f"first item ({name}={values[0].text}) is estimated")

    def _assign(self, item, line: int, conditional: bool) -> tuple[str, Field | list[Field]]:
        if isinstance(item, tuple):   # an array
            _tag, name, plus, words = item
            fields = [f for w in words for f in self.expand(w, line)]
            prev = self.vars.get(name)
            if plus and isinstance(prev, list):
                fields = [*prev, *fields]
            return name, fields
        text_parts = list(item)
        raw = "".join(t for _k, t, _q in text_parts)
        m = _ASSIGN.match(raw)
        # callers check _is_assignment(item) first: the leading literal text, a prefix of raw,
        # matches _ASSIGN, so raw does too
        assert m is not None
        # the parts after "NAME=": drop the literal prefix characters
        cut = m.end()
        rest: list = []
        consumed = 0
        for k, t, q in text_parts:
            if consumed >= cut:
                rest.append((k, t, q))
            elif k == "lit" and consumed + len(t) > cut:
                rest.append((k, t[cut - consumed:], q))
                consumed = cut
            else:
                consumed += len(t)
        fields = self.expand([(k, t, True) for k, t, _q in rest], line)
        value = Field(fields[0].text if fields else "", fields[0].vars if fields else ())
        prev_value = self.vars.get(m.group(1))
        if m.group(3) == "+" and isinstance(prev_value, Field):
            value = Field(prev_value.text + value.text, value.vars)
        return m.group(1), value

    def _set(self, name: str, value: Field | list[Field], conditional: bool) -> None:
        cur = self.vars.get(name)
        if conditional and cur is not None:
            text = cur.text if isinstance(cur, Field) else " ".join(f.text for f in cur)
            if text != "" and PLACEHOLDER.search(text) is None:
                return   # a branch's value only fills a variable the script left empty
        self.vars[name] = value

    def _is_assignment(self, item) -> bool:
        if isinstance(item, tuple):
            return item[0] == "array"
        lead = ""
        for kind, text, quoted in item:
            if kind != "lit" or quoted:
                break
            lead += text
        return _ASSIGN.match(lead) is not None

    def _command(self, items: list, line: int, conditional: bool, herestring) -> None:
        env: dict[str, Field | list[Field]] = {}
        k = 0
        while k < len(items) and self._is_assignment(items[k]):
            name, value = self._assign(items[k], line, conditional)
            env[name] = value
            k += 1
        words = items[k:]
        if not words:
            for name, value in env.items():
                self._set(name, value, conditional)
            return
        head = "".join(t for _k, t, _q in words[0]) if isinstance(words[0], list) else ""
        if head in _DECLARE:
            for w in words[1:]:
                if self._is_assignment(w):
                    name, value = self._assign(w, line, conditional)
                    self._set(name, value, conditional)
            return
        if head == "read" and herestring is not None:
            names = [("".join(t for _k, t, _q in w)) for w in words[1:] if isinstance(w, list)]
            names = [n for n in names if _NAME.fullmatch(n)]
            text = " ".join(f.text for f in self.expand(herestring, line))
            sep = env.get("IFS", self.vars.get("IFS"))
            sep_text = sep.text if isinstance(sep, Field) else None
            pieces = re.split(f"[{re.escape(sep_text)}]", text) if sep_text else text.split()
            for n, name in enumerate(names):
                if n >= len(pieces):
                    piece = ""
                elif n < len(names) - 1:
                    piece = pieces[n]
                else:
                    piece = (sep_text or " ").join(pieces[n:])
                self.vars[name] = Field(piece.strip())
            return
        if head in ("source", ".") and len(words) > 1 and self.depth < 3:
            target = " ".join(f.text for f in self.expand(words[1], line))
            here = os.path.join(os.path.dirname(os.path.abspath(self.path)), target)
            if not PLACEHOLDER.search(target) and os.path.isfile(here):
                try:
                    with open(here, encoding="utf-8") as fh:
                        sub_text = fh.read()
                except (OSError, UnicodeDecodeError):
                    return
                sub = _Shell(here, self.script.sbatch, self.depth + 1)
                sub.vars = self.vars
                got = sub.run(sub_text)
                self.script.commands.extend(got.commands)
                self.script.unresolved.extend(u for u in got.unresolved
                                              if u not in self.script.unresolved)
                self.script.loops.extend(got.loops)
            return
        fields: list[Field] = []
        for w in words:
            if isinstance(w, list):
                fields.extend(self.expand(w, line))
        if fields:
            self.script.commands.append(Command(env=env, words=fields, line=line,
                                                source=self.path))


def _sbatch(text: str) -> dict:
    out: dict[str, str] = {}
    for m in re.finditer(r"^#SBATCH\s+(.*)$", text, re.M):
        try:
            tokens = shlex.split(m.group(1), comments=True)
        except ValueError:
            continue
        k = 0
        while k < len(tokens):
            tok = tokens[k]
            if tok.startswith("--") and "=" in tok:
                name, _eq, value = tok.partition("=")
                out[name] = value
            elif tok.startswith("-") and k + 1 < len(tokens) and not tokens[k + 1].startswith(
                    "-"):
                out[tok] = tokens[k + 1]
                k += 1
            else:
                out[tok] = "true"
            k += 1
    return out


def read_script(path: str, text: str) -> Script:
    """The simple commands and variables of a bash script (nothing is executed)."""
    return _Shell(path, _sbatch(text)).run(text)


def is_script(path: str, text: str) -> bool:
    """A shell script: ``.sh``/``.bash``/``.zsh`` or a ``#!`` line naming a shell."""
    ext = os.path.splitext(path)[1].lower()
    if ext in (".sh", ".bash", ".zsh", ".slurm", ".sbatch"):
        return True
    first = text.lstrip("\ufeff").split("\n", 1)[0]
    return first.startswith("#!") and re.search(r"\b(ba|z|k|da)?sh\b", first) is not None




# == launchers and programs ==================================================================
# (the shell reader above; what follows finds the launched training command and maps it)
FORMAT = "launch-script"
#: the key :func:`fmest.configs.parse_text` files a shell script's text under
SCRIPT_KEY = "(shell script)"

#: what :func:`map_config` recognises, listed when a script launches none of it
LAUNCHERS = ("torchrun", "python -m torch.distributed.run/launch", "deepspeed",
             "accelerate launch", "srun", "mpirun/mpiexec -np", "ray job submit -- ...",
             "bash -c '...'", "swift <sub>", "megatron <sub> (ms-swift)", "python script.py",
             "python -m module")
PROGRAMS = ("Megatron-LM pretrain_*.py / finetune*.py / train.py with Megatron flags",
            "Megatron-Bridge scripts/training/run_recipe.py (--recipe, key=value overrides)",
            "ms-swift swift sft|pt|rlhf|infer|deploy|sample|export|eval|merge-lora and "
            "megatron sft|pt|rlhf|export",
            "OpenRLHF openrlhf.cli.train_sft|train_dpo|train_rm|train_ppo_ray|train_kto|"
            "train_prm",
            "a Python script with HF TrainingArguments or DeepSpeed-Chat flags "
            "(--model_name_or_path, --per_device_train_batch_size, --zero_stage, ...)")

# torch/distributed/run.py (PyTorch 2.x ``get_args_parser``): options without a value
_TORCHRUN_FLAGS = {"--standalone", "--module", "-m", "--no-python", "--no_python",
                   "--run-path", "--run_path", "--use-env", "--use_env",
                   "--virtual-local-rank", "--virtual_local_rank"}
# deepspeed/launcher/runner.py ``parse_args`` (microsoft/DeepSpeed): options without a value
_DEEPSPEED_FLAGS = {"--module", "--no_python", "--no_local_rank", "--force_multi",
                    "--save_pid", "--bind_cores_to_rank", "--elastic_training", "--no_ssh",
                    "--no_ssh_check", "--autotuning_run"}
# accelerate/commands/launch.py ``launch_command_parser``: options without a value
_ACCELERATE_FLAGS = {"--multi_gpu", "--cpu", "--use_deepspeed", "--use_fsdp",
                     "--use_megatron_lm", "--use_xpu", "-m", "--module", "--no_python",
                     "--debug", "-q", "--quiet", "--same_network", "--tpu",
                     "--enable_cpu_affinity", "--dynamo_use_fullgraph",
                     "--dynamo_use_dynamic", "--downcast_bf16", "--monitor_interval"}
_SRUN_FLAGS = {"--exclusive", "--overcommit", "-l", "--label", "--pty", "-u", "--unbuffered",
               "--no-container-mount-home", "--container-remap-root", "--container-writable",
               "--no-kill", "-K", "--kill-on-bad-exit", "-O", "--wait", "-v", "--verbose"}
_MPIRUN_FLAGS = {"--allow-run-as-root", "--oversubscribe", "--tag-output", "-tag-output",
                 "--report-bindings", "-report-bindings", "--display-map", "-q", "--quiet",
                 "-v", "--verbose", "--noprefix", "-noprefix"}
_PYTHON_FLAGS = {"-u", "-O", "-OO", "-B", "-s", "-S", "-E", "-I", "-b", "-bb", "-q"}
_WRAPPERS = {"nohup", "exec", "time", "sudo", "stdbuf", "nice", "command", "eval"}

# program names that are not training (matched in the script/module name); generation and
# serving are answered as inference
_NAMES = ((("text_generation", "generat", "infer", "serve", "server", "deploy", "chat"),
           "inference"),
          (("quantiz",), "quantization"),
          (("merge", "lora_combiner", "combine"), "merge"),
          (("export", "to_hf", "to_mcore"), "export"),
          (("convert", "conversion", "roundtrip", "checkpoint", "ckpt", "prune",
            "zero_to", "to_universal", "inspector"), "conversion"),
          (("preprocess", "prepare", "tokeniz", "download", "build_", "shard", "extract",
            "data_processing", "synthesize", "dataset"), "data preparation"),
          (("eval", "mmlu", "validate", "compare", "benchmark", "bench", "test"),
           "evaluation"))

# Megatron-LM arguments (megatron/training/arguments.py) that only a Megatron program takes
_MEGATRON_MARKERS = {"--num-layers", "--hidden-size", "--tensor-model-parallel-size",
                     "--pipeline-model-parallel-size", "--micro-batch-size",
                     "--global-batch-size", "--seq-length", "--num-attention-heads",
                     "--use-mcore-models", "--train-iters", "--context-parallel-size"}
# HF TrainingArguments (transformers training_args.py) and DeepSpeed-Chat (deepspeedai/
# DeepSpeedExamples applications/DeepSpeed-Chat/training/step*/main.py) flags
_HF_MARKERS = {"--model_name_or_path", "--per_device_train_batch_size",
               "--gradient_accumulation_steps", "--max_seq_len", "--max_seq_length",
               "--zero_stage", "--lora_dim", "--actor_model_name_or_path",
               "--per_device_training_batch_size", "--num_train_epochs", "--deepspeed",
               "--output_dir"}
_DSCHAT_MARKERS = {"--zero_stage", "--lora_dim", "--actor_model_name_or_path",
                   "--max_seq_len", "--offload", "--only_optimize_lora",
                   "--per_device_training_batch_size", "--data_split", "--lora_module_name"}


@define
class Candidate:
    """A launched program: its kind (``training``, ``inference`` or a not-training kind),
    its argument format, its arguments and the GPU layout the launchers give it."""

    kind: Optional[str]   # None: an ms-swift subcommand ms_swift.command_kind does not know
    fmt: str
    program: str
    args: list
    layout: dict
    line: int
    env: dict


def _text(fields: list) -> list[str]:
    return [f.text for f in fields]


def _options(words: list, i: int, flags: set, short_attached: bool = False,
             two_values: frozenset = frozenset()) -> tuple[dict, int]:
    """A launcher's options from ``words[i]`` up to the first non-option word: ``{name:
    Field or True}`` and the index of the program."""
    opts: dict = {}
    while i < len(words):
        tok = words[i].text
        if tok == "--":
            return opts, i + 1
        if not tok.startswith("-") or tok == "-":
            break
        if tok.startswith("--") and "=" in tok:
            name, _eq, value = tok.partition("=")
            opts[name] = Field(value, words[i].vars)
            i += 1
        elif tok in flags:
            opts[tok] = True
            i += 1
        elif short_attached and re.fullmatch(r"-[A-Za-z]\d+", tok):
            opts[tok[:2]] = Field(tok[2:], words[i].vars)
            i += 1
        elif tok in two_values and i + 2 < len(words):
            opts[f"{tok} {words[i + 1].text}"] = words[i + 2]
            i += 3
        elif i + 1 < len(words):
            opts[tok] = words[i + 1]
            i += 2
        else:
            opts[tok] = True
            i += 1
    return opts, i


def _note(layout: dict, launcher: str, opts: dict) -> None:
    """Remember a launcher's options: those that set no layout field are reported."""
    layout.setdefault("(options)", []).extend((launcher, name) for name in opts)


def _origin(launcher: str, name: str, value: Field) -> str:
    where = f"{launcher} {name}"
    if value.vars:
        where += f" (${', $'.join(value.vars)})"
    return where


def _count(value: Field) -> Optional[int]:
    text = value.text.strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    m = re.fullmatch(r"\d+:(\d+)", text)   # torchrun --nnodes MIN:MAX (elastic): the most
    return int(m.group(1)) if m else None


def _devices(value: Field) -> Optional[int]:
    """The number of devices a ``CUDA_VISIBLE_DEVICES`` list names."""
    text = value.text.strip().strip(",")
    if not text or PLACEHOLDER.search(text):
        return None
    return len([d for d in text.split(",") if d.strip()])


class _Finder:
    """Walks the commands of a script to the programs they launch."""

    def __init__(self, script: Script, shell_vars: dict, path: str) -> None:
        self.script = script
        self.vars = shell_vars
        self.path = path
        self.candidates: list[Candidate] = []
        self.unknown: list[str] = []
        self.skipped: list[tuple[int, str, list]] = []   # other commands' --flags
        self.depth = 0

    def env(self, env: dict, name: str) -> Optional[tuple[Field, str]]:
        if name in env:
            return env[name], f"{name}={env[name].text}"
        value = self.vars.get(name)
        if isinstance(value, Field):
            return value, f"{name}={value.text}"
        return None

    def command(self, cmd: Command, layout: Optional[dict] = None, depth: int = 0) -> None:
        layout = dict(layout or {})
        words = list(cmd.words)
        env = dict(cmd.env)
        i = 0
        while i < len(words):
            tok = words[i].text
            head = os.path.basename(tok)
            nxt = words[i + 1].text if i + 1 < len(words) else ""
            if head in _WRAPPERS:
                i += 1
            elif head == "uv" and nxt == "run":
                uv_opts, i = _options(words, i + 2, {"--no-sync", "--frozen", "--locked",
                                                     "--isolated", "--no-project", "--active"})
                _note(layout, "uv run", uv_opts)   # reported: environment options only
            elif head == "env":
                i += 1
                while i < len(words) and (_ASSIGN.match(words[i].text) or
                                          words[i].text.startswith("-")):
                    m = _ASSIGN.match(words[i].text)
                    if m:
                        env[m.group(1)] = Field(words[i].text[m.end():], words[i].vars)
                    i += 1
            elif (m := _ASSIGN.match(tok)) and "=" in tok and not tok.startswith("-") and \
                    m.end() <= len(tok):
                env[m.group(1)] = Field(tok[m.end():], words[i].vars)
                i += 1
            elif tok == "" or (PLACEHOLDER.fullmatch(tok) and i + 1 < len(words)):
                i += 1   # an empty expansion or a prefix the script leaves unset ($VENV_PREFIX)
            elif head in ("bash", "sh") and any(re.fullmatch(r"-[a-z]*c[a-z]*", t)
                                                for t in _text(words[i + 1:i + 3])):
                k = next(n for n in range(i + 1, min(i + 3, len(words)))
                         if re.fullmatch(r"-[a-z]*c[a-z]*", words[n].text))
                if k + 1 < len(words) and depth < 3:
                    sub = _Shell(self.path, self.script.sbatch, 1)
                    sub.vars = dict(self.vars)
                    sub.vars.update(env)
                    for c in sub.run(words[k + 1].text).commands:
                        c.line = cmd.line
                        self.command(c, layout, depth + 1)
                return
            elif head == "srun":
                opts, i = _options(words, i + 1, _SRUN_FLAGS, short_attached=True)
                _note(layout, "srun", opts)
                for name in ("-N", "--nodes"):
                    if name in opts and isinstance(opts[name], Field) and _count(opts[name]):
                        layout["hardware.nodes"] = (_count(opts[name]),
                                                    _origin("srun", name, opts[name]))
                for name in ("--ntasks-per-node",):
                    if name in opts and isinstance(opts[name], Field) and _count(opts[name]):
                        layout["(tasks per node)"] = (_count(opts[name]),
                                                      _origin("srun", name, opts[name]))
            elif head in ("mpirun", "mpiexec"):
                opts, i = _options(words, i + 1, _MPIRUN_FLAGS,
                                   two_values=frozenset({"--mca", "-mca", "-gmca", "--gmca"}))
                _note(layout, head, opts)
                for name in ("-np", "-n", "--np", "-c"):
                    if name in opts and isinstance(opts[name], Field) and _count(opts[name]):
                        layout["(tasks)"] = (_count(opts[name]),
                                             _origin(head, name, opts[name]))
                for name in ("-npernode", "--npernode", "-N", "--map-by"):
                    v = opts.get(name)
                    if isinstance(v, Field):
                        m = re.search(r"(?:^|ppr:)(\d+)(?::node)?$", v.text)
                        if m:
                            layout["(tasks per node)"] = (int(m.group(1)),
                                                          _origin(head, name, v))
            elif head == "ray" and "--" in _text(words[i:]):
                i = _text(words).index("--", i) + 1
            elif head == "torchrun" or (head.startswith("python") and nxt == "-m" and
                                        i + 2 < len(words) and words[i + 2].text in (
                                            "torch.distributed.run",
                                            "torch.distributed.launch")):
                launcher = "torchrun" if head == "torchrun" else f"python -m {words[i + 2].text}"
                opts, j = _options(words, i + (1 if head == "torchrun" else 3),
                                   _TORCHRUN_FLAGS)
                self._torchrun(launcher, opts, layout)
                _note(layout, launcher, opts)
                module = bool({"-m", "--module"} & set(opts))
                self.program(words[j:], module, launcher, layout, env, cmd.line)
                return
            elif head == "deepspeed":
                opts, j = _options(words, i + 1, _DEEPSPEED_FLAGS)
                self._deepspeed(opts, layout, env)
                _note(layout, "deepspeed", opts)
                self.program(words[j:], "--module" in opts, "deepspeed", layout, env, cmd.line)
                return
            elif head == "accelerate" and nxt == "launch":
                opts, j = _options(words, i + 2, _ACCELERATE_FLAGS)
                self._accelerate(opts, layout)
                _note(layout, "accelerate launch", opts)
                module = bool({"-m", "--module"} & set(opts))
                self.program(words[j:], module, "accelerate launch", layout, env, cmd.line)
                return
            else:
                self.program(words[i:], False, "", layout, env, cmd.line)
                return

    # launchers ------------------------------------------------------------------------
    def _torchrun(self, launcher: str, opts: dict, layout: dict) -> None:
        for names, field_ in ((("--nproc_per_node", "--nproc-per-node"),
                               "hardware.gpus_per_node"),
                              (("--nnodes",), "hardware.nodes")):
            name = next((n for n in names if n in opts), "")
            value = opts.get(name) if name else None
            if isinstance(value, Field) and _count(value):
                layout[field_] = (_count(value), _origin(launcher, name, value))
            elif isinstance(value, Field):
                layout.setdefault("(unresolved)", []).append(
                    f"{launcher} {name} {value.text}")
            elif field_ == "hardware.gpus_per_node":
                # torch/distributed/run.py: --nproc-per-node defaults to "1"
                layout[field_] = (1, f"({launcher} without --nproc_per_node: one process "
                                     "per node, torchrun's default)")
        layout["(launcher)"] = launcher

    def _deepspeed(self, opts: dict, layout: dict, env: dict) -> None:
        inc = opts.get("--include")
        if isinstance(inc, Field) and not inc.unresolved:
            hosts = [h for h in inc.text.split("@") if h.strip()]
            slots = [len(h.split(":", 1)[1].split(",")) if ":" in h else None for h in hosts]
            if slots and slots[0]:
                layout["hardware.gpus_per_node"] = (slots[0], _origin("deepspeed", "--include",
                                                                      inc))
            if len(hosts) > 1:
                layout["hardware.nodes"] = (len(hosts), _origin("deepspeed", "--include", inc))
        for name, field_ in (("--num_gpus", "hardware.gpus_per_node"),
                             ("--num_nodes", "hardware.nodes")):
            value = opts.get(name)
            if isinstance(value, Field) and _count(value):
                layout[field_] = (_count(value), _origin("deepspeed", name, value))
            elif isinstance(value, Field):
                layout.setdefault("(unresolved)", []).append(f"deepspeed {name} {value.text}")
        if "hardware.gpus_per_node" not in layout:
            # deepspeed/launcher/runner.py: without --num_gpus/--include every visible GPU
            got = self.env(env, "CUDA_VISIBLE_DEVICES")
            if got is not None and _devices(got[0]):
                layout["hardware.gpus_per_node"] = (_devices(got[0]), f"{got[1]} (deepspeed "
                                                    "uses every visible GPU)")
        layout["(launcher)"] = "deepspeed"

    def _accelerate(self, opts: dict, layout: dict) -> None:
        procs = opts.get("--num_processes")
        machines = opts.get("--num_machines")
        n_machines = _count(machines) if isinstance(machines, Field) else None
        total = _count(procs) if isinstance(procs, Field) else None
        if isinstance(procs, Field) and total:
            # accelerate: num_processes is the total over machines
            per = total // (n_machines or 1) if total % (n_machines or 1) == 0 else None
            if per:
                layout["hardware.gpus_per_node"] = (per, _origin("accelerate launch",
                                                                 "--num_processes", procs) + (
                    f" / --num_machines {n_machines}" if n_machines else ""))
        if n_machines and isinstance(machines, Field):   # n_machines implies a Field
            layout["hardware.nodes"] = (n_machines, _origin("accelerate launch",
                                                            "--num_machines", machines))
        cfg = opts.get("--config_file")
        if isinstance(cfg, Field):
            layout["(accelerate config)"] = cfg
        layout["(launcher)"] = "accelerate launch"

    # programs -------------------------------------------------------------------------
    def program(self, words: list, module: bool, launcher: str, layout: dict, env: dict,
                line: int) -> None:
        if not words:
            return
        tok = words[0].text
        head = os.path.basename(tok)
        if head.startswith("python") and re.fullmatch(r"python[\d.]*", head):
            i = 1
            while i < len(words) and words[i].text in _PYTHON_FLAGS | {"-W", "-X"}:
                i += 2 if words[i].text in ("-W", "-X") else 1
            if i < len(words) and words[i].text == "-m":
                module, i = True, i + 1
            if i < len(words) and words[i].text in ("torch.distributed.run",
                                                    "torch.distributed.launch") and module:
                opts, j = _options(words, i + 1, _TORCHRUN_FLAGS)
                name = f"python -m {words[i].text}"
                self._torchrun(name, opts, layout)
                _note(layout, name, opts)
                self.program(words[j:], bool({"-m", "--module"} & set(opts)), name, layout,
                             env, line)
                return
            if i < len(words) and words[i].text == "-c":
                return
            if not launcher:
                launcher = "python"
            words = words[i:]
            if not words:
                return
            tok = words[0].text
            head = os.path.basename(tok)
        args = words[1:]
        name = tok if module else head
        if head in ("swift", "megatron") and args and re.fullmatch(r"[a-z_-]+", args[0].text):
            self._add(_ms_swift_kind(head, args[0].text), "ms-swift", f"{head} {args[0].text}",
                      args[1:], launcher or head, layout, env, line, swift=True)
            return
        # ms-swift's entry points run as scripts (modelscope/ms-swift swift/cli/<sub>.py and
        # swift/cli/_megatron/<sub>.py: what `swift <sub>` / `megatron <sub>` call)
        cli = re.search(r"swift[/.]cli[/.](_megatron[/.])?([a-z_]+)(\.py)?$", tok)
        if cli and cli.group(2) not in ("main", "utils", "__init__"):
            program = f"{'megatron' if cli.group(1) else 'swift'} {cli.group(2)}"
            self._add(_ms_swift_kind(*program.split()), "ms-swift", program, args,
                      launcher or "python", layout, env, line, swift=True)
            return
        if "openrlhf.cli." in name or "openrlhf/cli/" in name:
            stem = name.replace("/", ".").rsplit(".", 2)[-2 if name.endswith(".py") else -1]
            kind = "training" if stem.startswith("train_") else (
                "inference" if "serve" in stem else "merge")
            self._add(kind, "openrlhf", f"openrlhf.cli.{stem}", args, launcher, layout, env,
                      line)
            return
        if head in ("bash", "sh", "sbatch", "source", ".") or head.endswith(".sh"):
            target = tok if head.endswith(".sh") else next(
                (a.text for a in args if a.text.endswith(".sh")), "")
            opts = _options(args, 0, set(), short_attached=True)[0] if head == "sbatch" else {}
            self._other_script(target, line, opts)
            return
        if not (module or head.endswith(".py")) and not launcher:
            self._skipped(line, head, args)
            return
        flags = {a.text.split("=", 1)[0] for a in args if a.text.startswith("--")}
        if PLACEHOLDER.search(head if not module else name):
            self.unknown.append(name)
            return
        stem = (name.rsplit(".", 1)[-1] if module else os.path.splitext(head)[0]).lower()
        kind = "training"
        for words_, k in _NAMES:
            if any(w in stem for w in words_):
                kind = k
                break
        if "train" in stem and kind not in ("inference",):
            kind = "training"
        if head == "run_recipe.py" or "--recipe" in flags or (
                any(re.fullmatch(r"(model|train|optimizer|checkpoint|dataset|ddp|"
                                 r"mixed_precision|peft)\.[\w.]+=.*", a.text) for a in args)
                and not flags & _HF_MARKERS):
            fmt = "bridge"
        elif stem.startswith("pretrain_") or flags & _MEGATRON_MARKERS:
            fmt = "megatron"
        elif flags & _HF_MARKERS or kind != "training":
            fmt = "hf-script"
        else:
            self.unknown.append(name)
            self._skipped(line, name, args)
            return
        self._add(kind, fmt, name, args, launcher or "python", layout, env, line)

    def _skipped(self, line: int, name: str, args: list) -> None:
        flags = [a.text.split("=", 1)[0] for a in args if a.text.startswith("--")]
        if flags:
            self.skipped.append((line, name, flags))

    def _other_script(self, target: str, line: int, sbatch: Optional[dict] = None) -> None:
        """Another script the script runs (``bash x.sh``, ``sbatch x.sh``, ``./x.sh``): read
        when it is next to this one."""
        if not target or self.depth >= 2 or PLACEHOLDER.search(os.path.basename(target)):
            if target:
                self.unknown.append(target)
            return
        here = None if PLACEHOLDER.search(target) else \
            _find_up(os.path.dirname(os.path.abspath(self.path)), target)
        if here is None:
            stem = os.path.splitext(os.path.basename(target))[0].lower()
            kind = next((k for names, k in _NAMES if any(n in stem for n in names)), None)
            if kind is not None and kind != "inference" and "train" not in stem:
                # a conversion/evaluation script the corpus does not hold: its name says so
                self.candidates.append(Candidate(kind=kind, fmt="none", program=target,
                                                 args=[], layout={}, line=line, env={}))
            else:
                self.unknown.append(target)
            return
        try:
            with open(here, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError):
            self.unknown.append(target)
            return
        sub = _Shell(here, _sbatch(text), 1)
        sub.vars = dict(self.vars)
        got = sub.run(text)
        finder = _Finder(got, got.variables, here)
        finder.depth = self.depth + 1
        for c in got.commands:
            finder.command(c)
        for c in finder.candidates:
            c.program = f"{target} {c.program}"
            for name, value in (sbatch or {}).items():
                if name in ("-N", "--nodes") and isinstance(value, Field) and _count(value):
                    c.layout["hardware.nodes"] = (_count(value), _origin("sbatch", name, value))
                else:
                    c.layout.setdefault("(options)", []).append(("sbatch", name))
        self.candidates.extend(finder.candidates)
        self.unknown.extend(finder.unknown)
        self.skipped.extend(finder.skipped)

    def _add(self, kind: Optional[str], fmt: str, program: str, args: list, launcher: str,
             layout: dict, env: dict, line: int, swift: bool = False) -> None:
        layout = dict(layout)
        if swift:
            self._swift_layout(program, launcher, layout, env)
        self._fallback_layout(layout, env, launcher)
        self.candidates.append(Candidate(kind=kind, fmt=fmt, program=program, args=args,
                                         layout=layout, line=line, env=env))

    def _swift_layout(self, program: str, launcher: str, layout: dict, env: dict) -> None:
        # ms-swift swift/cli/main.py: NPROC_PER_NODE / NNODES make it start torchrun
        got = self.env(env, "NPROC_PER_NODE")
        if got is not None and _count(got[0]):
            layout["hardware.gpus_per_node"] = (_count(got[0]), got[1])
        nodes = self.env(env, "NNODES")
        if nodes is not None and _count(nodes[0]):
            layout["hardware.nodes"] = (_count(nodes[0]), nodes[1])
        if "hardware.gpus_per_node" in layout or launcher not in ("swift", "megatron"):
            return
        visible = self.env(env, "CUDA_VISIBLE_DEVICES")
        if visible is None:
            return
        n = _devices(visible[0])
        if n and _ms_swift_kind(*program.split(" ", 1)) == "inference":
            layout["hardware.gpus_per_node"] = (n, visible[1])
        elif n == 1 or (n and program.startswith("megatron")):
            layout["hardware.gpus_per_node"] = (1, f"{visible[1]} (no NPROC_PER_NODE: one "
                                                   "process)")
        elif n:
            layout["hardware.gpus_per_node"] = (n, f"{visible[1]} (no NPROC_PER_NODE)")
            layout["(device_map)"] = (n, visible[1])

    def _fallback_layout(self, layout: dict, env: dict, launcher: str) -> None:
        if "hardware.gpus_per_node" not in layout:
            tasks = layout.get("(tasks per node)") or (
                layout.get("(tasks)") if "hardware.nodes" not in layout else None)
            if tasks and launcher in ("python", "", "srun", "mpirun", "mpiexec"):
                layout["hardware.gpus_per_node"] = tasks
            elif launcher in ("python", "", "srun"):
                value = self.script.sbatch.get("--ntasks-per-node")
                if value and re.fullmatch(r"\d+", value):   # one task per GPU
                    layout["hardware.gpus_per_node"] = (int(value),
                                                        f"#SBATCH --ntasks-per-node {value}")
        for names, field_ in ((("GPUS_PER_NODE", "NUM_GPUS", "N_GPUS", "NGPUS",
                                "NUM_GPUS_PER_NODE", "GPU_NUM"), "hardware.gpus_per_node"),
                              (("NNODES", "NUM_NODES", "N_NODES", "NODES"), "hardware.nodes")):
            if field_ in layout:
                continue
            for name in names:
                got = self.env(env, name)
                if got is not None and _count(got[0]):
                    layout[field_] = (_count(got[0]), f"{got[1]} (script variable)")
                    break
        if "hardware.nodes" not in layout:
            for name in ("-N", "--nodes"):
                value = self.script.sbatch.get(name)
                if value and re.fullmatch(r"\d+", value):
                    layout["hardware.nodes"] = (int(value), f"#SBATCH {name} {value}")
                    break


def _ms_swift_kind(head: str, sub: str) -> Optional[str]:
    from fmest.configs import ms_swift

    return ms_swift.command_kind(head, sub)


# == mapping =================================================================================
def args_dict(fields: list) -> dict:
    """Program arguments as ``{"--flag": value}`` (Megatron-LM's reader: a bare flag is
    ``True``, several values a list, a later repeat wins)."""
    from fmest.configs.megatron import parse_args

    return parse_args(_text(fields))


def _has_placeholder(value) -> bool:
    if isinstance(value, list):
        return any(_has_placeholder(v) for v in value)
    return isinstance(value, str) and PLACEHOLDER.search(value) is not None


def drop_unresolved(doc: dict, sink: Sink, prefix: str = "") -> tuple[dict, list[str]]:
    """``doc`` without the keys whose value the script leaves unset (``$1``, an environment
    variable): each is reported, and the list ``["key=value", ...]`` returned for the
    warning that names them."""
    out: dict = {}
    dropped: list[str] = []
    for key, value in doc.items():
        if key != "(positional)" and _has_placeholder(value):
            shown = " ".join(value) if isinstance(value, list) else value
            sink.ignore(f"{prefix}{key}", f"{shown!r} is not set in the script (a positional "
                        "argument or an environment variable); fmest's default is kept")
            dropped.append(f"{prefix}{key} {shown}")
        else:
            out[key] = value
    return out, dropped


def _find_up(folder: str, value: str) -> Optional[str]:
    if os.path.isabs(value):
        return value if os.path.isfile(value) else None
    here = folder
    for _ in range(6):
        cand = os.path.join(here, value)
        if os.path.isfile(cand):
            return cand
        up = os.path.dirname(here)
        if up == here:
            break
        here = up
    return value if os.path.isfile(value) else None


def find_file(sink: Sink, value: str) -> Optional[str]:
    """A file a script names: next to the script, in a folder above it (ms-swift and
    DeepSpeed-Chat examples name files from the folder they are run from), then in the working
    directory."""
    return _find_up(sink.dir, value)


def _unresolved_warning(sink: Sink, script: Script, dropped: list[str]) -> None:
    if dropped:
        names = sorted({m.group(0) for d in dropped for m in PLACEHOLDER.finditer(d)})
        sink.unmodelled("(unresolved shell values)", f"{', '.join(names)} not set in the "
                        f"script (positional arguments or environment variables), used by: "
                        f"{'; '.join(dropped)}; those keys keep fmest's defaults (give the "
                        "values with flags)")


def map_config(doc: dict, sink: Sink) -> None:
    from fmest.configs._base import NOT_TRAINING

    text = doc.get(SCRIPT_KEY)
    if not isinstance(text, str):
        raise sink.error("(file)", "expected a shell script (a .sh file or a #! line)",
                         accepted=("a bash launch script",))
    script = read_script(sink.path or sink.name, text)
    finder = _Finder(script, script.variables, sink.path or sink.name)
    for cmd in script.commands:
        finder.command(cmd)
    cands = finder.candidates
    training = [c for c in cands if c.kind == "training"]
    inference = [c for c in cands if c.kind == "inference"]
    if training:
        chosen = training[0]
    elif inference:
        chosen = inference[0]
    elif cands:
        c = cands[0]
        kind = c.kind if c.kind in NOT_TRAINING else "conversion"
        if c.fmt == "ms-swift":
            from fmest.configs import ms_swift

            kind = ms_swift.not_training_kind(c.program, args_dict(c.args))
        raise sink.not_training(f"line {c.line}: {c.program}", kind,
                                "the script launches no training program")
    elif not script.commands:
        raise sink.error("(launched command)", "the script runs no command (only comments and "
                         "variable assignments: a file another script sources); give the "
                         "script that launches the training", accepted=PROGRAMS)
    else:
        seen = f"; it runs {', '.join(dict.fromkeys(finder.unknown))}" if finder.unknown else ""
        raise sink.error("(launched command)", "no training command this reader recognises"
                         f"{seen}; launchers recognised: {', '.join(LAUNCHERS)}; programs",
                         accepted=PROGRAMS)
    for c in cands:
        if c is chosen:
            continue
        launcher_flags = [name for _launcher, name in c.layout.get("(options)", [])
                          if str(name).startswith("-")]
        flag_text = " ".join(dict.fromkeys([*launcher_flags, *(a.text.split("=", 1)[0]
                                                               for a in c.args
                                                               if a.text.startswith("-"))]))
        what = f"line {c.line} {c.program} {flag_text}".strip()
        if c.kind == chosen.kind:
            sink.unmodelled(what, f"the script runs several "
                            f"{'training' if c.kind == 'training' else 'serving'} commands; "
                            f"line {chosen.line} ({chosen.program}) is estimated, not this one")
        else:
            sink.ignore(what, f"a {c.kind} command beside the estimated one")
    for line, name, flags in finder.skipped:
        sink.ignore(f"line {line} {name} {' '.join(dict.fromkeys(flags))}",
                    "a setup, data or housekeeping command; not part of the estimated run")
    used = {v for cmd in script.commands for w in cmd.words for v in getattr(w, "vars", ())}
    for name, value in script.variables.items():
        items = value if isinstance(value, list) else [value]
        flags = [t.split("=", 1)[0] for f in items for t in str(getattr(f, "text", f)).split()
                 if t.startswith("--")]
        if flags and name not in used:   # e.g. a DISTRIBUTED_ARGS the launch line never uses
            sink.ignore(f"{name} {' '.join(dict.fromkeys(flags))}",
                        "a variable of flags that no launched command uses")
    for loop in script.loops:
        sink.unmodelled("(loop)", loop)
    _layout(chosen, sink)
    where = f"line {chosen.line} {chosen.program}"
    if chosen.kind == "inference":
        sink.set("mode", "inference", where)
    dropped: list[str] = []
    if chosen.fmt == "megatron":
        args, dropped = drop_unresolved(args_dict(chosen.args), sink)
        from fmest.configs import megatron

        megatron.map_config(args, sink)
    elif chosen.fmt == "bridge":
        dropped = _bridge(chosen, sink)
    elif chosen.fmt == "ms-swift":
        from fmest.configs import ms_swift

        args, dropped = drop_unresolved(args_dict(chosen.args), sink)
        ms_swift.map_args(chosen.program, args, sink, find_file)
    elif chosen.fmt == "openrlhf" and chosen.kind == "training":
        from fmest.configs import openrlhf

        args, dropped = drop_unresolved(args_dict(chosen.args), sink)
        openrlhf.map_args(chosen.program, args, sink)
    elif chosen.kind == "inference":
        args, dropped = drop_unresolved(args_dict(chosen.args), sink)
        _serve_script(chosen.program, args, sink)
    else:
        args, dropped = drop_unresolved(args_dict(chosen.args), sink)
        map_hf_script(chosen.program, args, sink)
    dropped += chosen.layout.get("(unresolved)", [])
    _unresolved_warning(sink, script, dropped)


def _layout(chosen: Candidate, sink: Sink) -> None:
    used = ""
    for field_ in ("hardware.gpus_per_node", "hardware.nodes"):
        if field_ in chosen.layout:
            value, origin = chosen.layout[field_]
            sink.set(field_, value, origin)
            used += origin + " "
    for name in ("(tasks per node)", "(tasks)"):
        if name in chosen.layout and chosen.layout[name][1] not in used:
            sink.ignore(chosen.layout[name][1], "processes per node of an outer launcher; the "
                        "inner launcher's GPU count is used")
            used += chosen.layout[name][1] + " "
    for launcher, name in dict.fromkeys(chosen.layout.get("(options)", [])):
        if name in ("-m", "--module"):
            sink.ignore(f"{launcher} {name}", "the program is a Python module")
        elif f"{launcher} {name}" not in used and name != "--":
            sink.ignore(f"{launcher} {name}", "launcher setting (addresses, ports, hosts, "
                        "containers, logging); does not change per-GPU memory, time or cost")
    if "(device_map)" in chosen.layout:
        n, origin = chosen.layout["(device_map)"]
        sink.set("parallelism.pp", n, f"{origin} (no NPROC_PER_NODE)")
        sink.unmodelled(origin, f"{n} visible GPUs and no NPROC_PER_NODE: ms-swift splits the "
                        "model over them with device_map and runs the layers one GPU after "
                        f"another; estimated as {n}-stage pipeline parallelism")
    cfg = chosen.layout.get("(accelerate config)")
    if isinstance(cfg, Field):
        key = "accelerate launch --config_file"
        path = find_file(sink, cfg.text) if not cfg.unresolved else None
        if path:
            sink.includes.append((path, os.path.relpath(path), "accelerate"))
            sink.ignore(key, f"names {os.path.relpath(path)}, read as an accelerate config "
                        "right after this file (config.files)")
        else:
            sink.unmodelled(key, f"{cfg.text!r} not found next to the script; its settings "
                            "(GPU count, mixed precision, FSDP/DeepSpeed) are not read: pass it "
                            "with --config")


# -- Megatron-Bridge scripts/training/run_recipe.py ----------------------------------------
# NVIDIA-NeMo/Megatron-Bridge scripts/training/run_recipe.py COMMON_OVERRIDE_FIELDS (commit
# 067f987df03b8355b03192d88d70f1709fedf51a)
_BRIDGE_FLAGS = {"--max_steps": "train.train_iters", "-ms": "train.train_iters",
                 "--global_batch_size": "train.global_batch_size",
                 "-gb": "train.global_batch_size",
                 "--micro_batch_size": "train.micro_batch_size",
                 "-mb": "train.micro_batch_size",
                 "--seq_length": "model.seq_length", "-sl": "model.seq_length",
                 "--tensor_model_parallel_size": "model.tensor_model_parallel_size",
                 "-tp": "model.tensor_model_parallel_size",
                 "--pipeline_model_parallel_size": "model.pipeline_model_parallel_size",
                 "-pp": "model.pipeline_model_parallel_size",
                 "--context_parallel_size": "model.context_parallel_size",
                 "-cp": "model.context_parallel_size",
                 "--virtual_pipeline_model_parallel_size":
                     "model.virtual_pipeline_model_parallel_size",
                 "-vp": "model.virtual_pipeline_model_parallel_size",
                 "--expert_model_parallel_size": "model.expert_model_parallel_size",
                 "-ep": "model.expert_model_parallel_size",
                 "--expert_tensor_parallel_size": "model.expert_tensor_parallel_size",
                 "-etp": "model.expert_tensor_parallel_size",
                 "--lr": "optimizer.lr", "--min_lr": "optimizer.min_lr",
                 "--warmup_iters": "scheduler.lr_warmup_iters",
                 "--pretrained_checkpoint": "checkpoint.pretrained_checkpoint",
                 "--save_dir": "checkpoint.save", "--load_dir": "checkpoint.load"}
# megatron/bridge/peft/lora.py LoRA: dim 32, alpha 32, linear_qkv/linear_proj/linear_fc1/fc2
_BRIDGE_LORA = (32, 32.0)


def _scalar_text(value: str):
    low = value.strip().lower()
    if low in ("null", "none", "~"):
        return None
    if low in ("true", "false"):
        return low == "true"
    return value


def _model_hint(sink: Sink, key: str, name: str) -> bool:
    from fmest.models.presets import find_preset

    name = name.strip().rstrip("/")
    for cand in (name, os.path.basename(name), os.path.basename(name).replace("_", "-")):
        if cand and find_preset(cand):
            sink.set("model", find_preset(cand), key)
            return True
    return False


def _bridge(chosen: Candidate, sink: Sink) -> list[str]:
    from fmest.configs import megatron

    nested: dict = {}
    keys: dict = {}
    mode_key = ""   # set together with mode; read only when mode is not None
    mode: Optional[str] = None
    dropped: list[str] = []
    model_known = False
    recipe = None
    k = 0
    args = chosen.args
    while k < len(args):
        tok = args[k].text
        name, eq, inline = tok.partition("=")
        if tok.startswith("-"):
            value = inline if eq else (args[k + 1].text if k + 1 < len(args) and
                                       not args[k + 1].text.startswith("-") else "true")
            k += 1 if eq or value == "true" and (k + 1 >= len(args) or
                                                 args[k + 1].text.startswith("-")) else 2
            if _has_placeholder(value):
                sink.ignore(name, f"{value!r} is not set in the script; fmest's default is kept")
                dropped.append(f"{name} {value}")
            elif name in ("--recipe", "--model"):
                recipe = value
                stem = re.sub(r"_(pretrain|sft|peft|finetune|lora|dora)(_config)?$", "",
                              re.sub(r"_config$", "", value))
                model_known = model_known or _model_hint(sink, name, stem)
                if re.search(r"_(peft|lora)(_|$)", value) and mode is None:
                    mode, mode_key = "lora", name
                elif re.search(r"_dora(_|$)", value) and mode is None:
                    mode, mode_key = "dora", name
            elif name == "--mode":
                mode, mode_key = value.strip().lower(), name
            elif name in _BRIDGE_FLAGS:
                section, field_ = _BRIDGE_FLAGS[name].split(".", 1)
                nested.setdefault(section, {})[field_] = _scalar_text(value)
                keys[_BRIDGE_FLAGS[name]] = name
            elif name in ("--step_func", "--step-func", "--dataset"):
                sink.ignore(name, "the forward step / dataset preset; does not change the "
                            "per-GPU memory of the step fmest prices")
            else:
                sink.unmodelled(name, "a run_recipe.py option fmest does not read")
            continue
        k += 1
        if not eq or "." not in name:
            sink.ignore(tok, "not an option or key=value override")
            continue
        if _has_placeholder(inline):
            sink.ignore(name, f"{inline!r} is not set in the script; fmest's default is kept")
            dropped.append(f"{name}={inline}")
            continue
        section, _dot, rest = name.partition(".")
        if section == "peft":
            if rest == "dim":
                nested.setdefault("(peft)", {})["dim"] = (inline, name)
            elif rest == "alpha":
                nested.setdefault("(peft)", {})["alpha"] = (inline, name)
            else:
                sink.ignore(name, "a LoRA detail (dropout, targets); fmest adapts all linear "
                            "layers")
            continue
        if section == "checkpoint" and rest == "pretrained_checkpoint":
            model_known = model_known or _model_hint(sink, name, inline)
        if "." in rest:   # deeper keys (dataset.source.x, model.some.y): one level is read
            sink.ignore(name, "a nested setting fmest does not read")
            continue
        nested.setdefault(section, {})[rest] = _scalar_text(inline)
    peft = nested.pop("(peft)", {})
    if mode in ("lora", "dora"):
        sink.set("training.technique", "lora", mode_key)
        rank = sink.int_(peft["dim"][1], peft["dim"][0]) if "dim" in peft else _BRIDGE_LORA[0]
        sink.set("training.lora_rank", rank, peft["dim"][1] if "dim" in peft else
                 f"{mode_key} (Megatron-Bridge LoRA default dim 32)")
        alpha = sink.num(peft["alpha"][1], peft["alpha"][0]) if "alpha" in peft else \
            _BRIDGE_LORA[1]
        sink.set("training.lora_alpha", alpha, peft["alpha"][1] if "alpha" in peft else
                 f"{mode_key} (Megatron-Bridge LoRA default alpha 32)")
        sink.set("training.lora_target_modules", ["all-linear"],
                 f"{mode_key} (Megatron-Bridge LoRA: linear_qkv, linear_proj, linear_fc1, "
                 "linear_fc2)")
        if mode == "dora":
            sink.unmodelled(mode_key, "DoRA's magnitude vectors are not modelled; estimated "
                            "as LoRA")
    elif mode in ("pretrain", "sft"):
        sink.set("training.technique", "full", mode_key)
    elif mode is not None:
        raise sink.error(mode_key, "not an accepted training mode", value=mode,
                         accepted=("pretrain", "sft", "lora", "dora"))
    if recipe is not None:
        sink.unmodelled("--recipe" if "--recipe" in _text(args) else "--model",
                        f"recipe {recipe!r}: the recipe's own settings (model, parallelism, "
                        "batch, sequence length, precision) are not read, only the overrides "
                        "on the command line; fmest's defaults fill the rest"
                        + ("" if model_known else "; give --model"))
    for section in list(nested):
        if section not in ("model", "train", "optimizer", "ddp", "comm_overlap", "dataset",
                           "mixed_precision", "checkpoint", "logger", "scheduler", "rng",
                           "tokenizer", "profiling", "dist"):
            sink.ignore(section, "not a Megatron-Bridge section fmest uses")
            nested.pop(section)
    if "mixed_precision" in nested and isinstance(nested["mixed_precision"], dict) and \
            set(nested["mixed_precision"]) == set():
        nested.pop("mixed_precision")
    megatron.map_config(nested, sink)
    return dropped


# -- Python scripts with HF TrainingArguments / DeepSpeed-Chat flags ------------------------
_SEQ_FLAGS = ("max_seq_len", "max_seq_length", "max_length", "seq_length", "block_size",
              "model_max_length", "cutoff_len", "max_len", "seq_len")
#: in this order: a ``--model_name`` is often only the name a run gives its model (ms-swift's
#: self-cognition name), so it comes last
_MODEL_FLAGS = ("model_name_or_path", "actor_model_name_or_path",
                "pretrained_model_name_or_path", "base_model", "model", "model_path",
                "model_name")
_HF_NAMES = {"per_device_train_batch_size", "gradient_accumulation_steps",
             "gradient_checkpointing", "bf16", "fp16", "num_train_epochs", "max_steps", "optim",
             "deepspeed", "fsdp", "fsdp_config", "torch_compile", "use_liger_kernel", "tf32"}
_HF_IGNORED_PREFIXES = (("learning_rate", HYPERPARAM_), ("lr_", HYPERPARAM_),
                        ("weight_decay", HYPERPARAM_), ("warmup", HYPERPARAM_),
                        ("num_warmup", HYPERPARAM_), ("seed", HYPERPARAM_),
                        ("adam_", HYPERPARAM_), ("max_grad_norm", HYPERPARAM_),
                        ("dropout", HYPERPARAM_), ("actor_dropout", HYPERPARAM_),
                        ("critic_dropout", HYPERPARAM_), ("actor_learning_rate", HYPERPARAM_),
                        ("critic_learning_rate", HYPERPARAM_),
                        ("actor_weight_decay", HYPERPARAM_),
                        ("critic_weight_decay", HYPERPARAM_),
                        ("data_", DATA_), ("dataset", DATA_), ("train_file", DATA_),
                        ("validation_file", DATA_), ("num_padding_at_beginning", DATA_),
                        ("preprocessing", DATA_), ("max_train_samples", DATA_),
                        ("output_dir", LOGGING_), ("logging", LOGGING_), ("save_", LOGGING_),
                        ("eval", LOGGING_), ("per_device_eval_batch_size", LOGGING_),
                        ("report_to", LOGGING_), ("enable_tensorboard", LOGGING_),
                        ("tensorboard", LOGGING_), ("print_", LOGGING_), ("local_rank",
                                                                            LOGGING_),
                        ("overwrite_output_dir", LOGGING_), ("do_train", LOGGING_),
                        ("do_eval", LOGGING_), ("run_name", LOGGING_),
                        ("cache_dir", LOGGING_), ("master_port", LOGGING_))


_SERVE_MODEL_FLAGS = ("--model_name_or_path", "--model", "--model-path", "--model_path",
                      "--hf_model_path", "--hf-model-path", "--hf_model_id", "--hf-model-id",
                      "--pretrained_model_name_or_path", "--base_model")


def _serve_script(program: str, args: dict, sink: Sink) -> None:
    """A generation/serving script: the model it names is served (``--mode inference``)."""
    for key, value in args.items():
        if key in _SERVE_MODEL_FLAGS and isinstance(value, str) and not _has_placeholder(value):
            if "model" not in sink.values:
                sink.set("model", value.strip(), key)
                continue
        if key == "(positional)":
            sink.ignore(" ".join(map(str, value)), "a positional argument")
        else:
            sink.unmodelled(key, f"an option of {program}, a generation script; serving "
                            "memory is estimated with fmest's inference defaults")


def map_flags(hf: dict, sink: Sink, map_keys) -> None:
    """TrainingArguments flags ``{name: value}`` through ``map_keys``, each origin and ignored
    entry named ``--name`` as the script spells it."""
    for name, value in hf.items():
        before = len(sink.ignored)
        map_keys({name: value}, sink)
        for n in range(before, len(sink.ignored)):
            if sink.ignored[n].startswith(f"{name}:"):
                sink.ignored[n] = f"--{sink.ignored[n]}"
        for fld, (v, k) in list(sink.values.items()):
            if k == name:
                sink.values[fld] = (v, f"--{name}")


def _number(value):
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?(\d+\.\d*|\.\d+|\d+)([eE]-?\d+)?",
                                               value.strip()):
        return float(value)
    return value


def _ignored_reason(name: str) -> Optional[str]:
    for prefix, reason in _HF_IGNORED_PREFIXES:
        if name.startswith(prefix):
            return reason
    return None


def map_hf_script(program: str, args: dict, sink: Sink) -> None:
    """A Python training script's flags: HF ``TrainingArguments`` names (mapped by
    :func:`fmest.configs.training_args.map_keys`), DeepSpeed-Chat's ``main.py`` flags
    (deepspeedai/DeepSpeedExamples applications/DeepSpeed-Chat/training/step1_supervised_
    finetuning/main.py, step3_rlhf_finetuning/main.py at commit
    45b4b7156c8794a3452a5a7d03dbd8d797068569), the model and the sequence length."""
    from fmest.configs.training_args import map_keys

    names: dict = {}
    for key, value in args.items():
        if key == "(positional)":
            sink.ignore(" ".join(map(str, value)), "a positional argument of the script")
        else:
            names[key[2:] if key.startswith("--") else key] = value
    dschat = bool({f"--{n}" for n in names} & _DSCHAT_MARKERS) or \
        "deepspeed-chat" in program.lower()
    rlhf = "actor_model_name_or_path" in names
    handled: set = set()

    def take(name: str):
        handled.add(name)
        return names.get(name)

    for name in _MODEL_FLAGS:
        if name in names and not isinstance(names[name], bool):
            sink.set("model", str(take(name)).strip(), f"--{name}")
            break
    for name in _SEQ_FLAGS:
        if name in names:
            sink.set("training.seq_len", sink.int_(f"--{name}", take(name)), f"--{name}")
            break
    if rlhf and "max_prompt_seq_len" in names and "max_answer_seq_len" in names:
        total = sink.int_("--max_prompt_seq_len", take("max_prompt_seq_len")) + \
            sink.int_("--max_answer_seq_len", take("max_answer_seq_len"))
        sink.set("training.seq_len", total, "--max_prompt_seq_len+--max_answer_seq_len")
    if dschat:
        _dschat(names, sink, take, rlhf)
    else:
        sink.set("training.stack", "hf-trainer", f"{program} (HF TrainingArguments flags)")
    if names.get("deepspeed") is True or str(names.get("deepspeed", "")).lower() == "true":
        take("deepspeed")
        sink.set("training.stack", "deepspeed", "--deepspeed")
    for name in ("deepspeed", "deepspeed_config", "deepspeed_config_file", "ds_config"):
        value = names.get(name)
        if isinstance(value, str) and value.strip() and name not in handled:
            take(name)
            path = find_file(sink, value.strip())
            if path:
                sink.includes.append((path, os.path.relpath(path), "deepspeed"))
                sink.ignore(f"--{name}", f"names {os.path.relpath(path)}, read as a deepspeed "
                            "config right after this file (config.files)")
            else:
                sink.unmodelled(f"--{name}", f"DeepSpeed config {value!r} not found next to the "
                                "script; its ZeRO stage, offload and precision are not read "
                                "(pass it with --config)")
    hf = {n: _number(v) for n, v in names.items() if n in _HF_NAMES and n not in handled}
    if dschat:
        hf.pop("deepspeed", None)
        if "deepspeed" in names:
            handled.add("deepspeed")
            sink.ignore("--deepspeed", "DeepSpeed-Chat's switch for the DeepSpeed engine "
                        "(its config is built from --zero_stage, --offload and --dtype)")
    for n in hf:
        handled.add(n)
    map_flags(hf, sink, map_keys)
    unknown = []
    for name in names:
        if name in handled:
            continue
        reason = _ignored_reason(name)
        if reason is not None:
            sink.ignore(f"--{name}", reason)
        else:
            unknown.append(f"--{name}")
    if unknown:
        sink.unmodelled(", ".join(unknown), f"flags of {program} fmest does not know; "
                        "assumed not to change memory, time or cost")


def _dschat(names: dict, sink: Sink, take, rlhf: bool) -> None:
    pre = "actor_" if rlhf else ""
    sink.set("training.stack", "deepspeed", "(DeepSpeed-Chat: the DeepSpeed engine)")
    # main.py: --dtype default fp16, choices fp16/bf16; dschat/utils/ds_utils.py
    # get_train_ds_config enables it in DeepSpeed (low-precision weights + fp32 master)
    dtype_key = "--dtype" if "dtype" in names else "(DeepSpeed-Chat default --dtype fp16)"
    dtype = sink.choice("--dtype", take("dtype") if "dtype" in names else "fp16",
                        {"fp16": "fp16", "bf16": "bf16"})
    sink.set("training.dtype", dtype, dtype_key)
    sink.set("training.precision", "master", dtype_key)
    zkey = f"{pre}zero_stage"
    stage = sink.choice(f"--{zkey}", take(zkey) if zkey in names else 0,
                        {0: 0, 1: 1, 2: 2, 3: 3, "0": 0, "1": 1, "2": 2, "3": 3})
    sink.set("parallelism.zero_stage", stage,
             f"--{zkey}" if zkey in names else "(DeepSpeed-Chat default --zero_stage 0)")
    if "offload" in names and stage == 0:
        take("offload")
        sink.ignore("--offload", "ZeRO stage 0: ds_utils.py puts the offload settings inside "
                    "zero_optimization, which DeepSpeed reads only with ZeRO")
    elif "offload" in names:
        if sink.bool_("--offload", take("offload")):
            # ds_utils.py: offload_param and offload_optimizer both on "cpu"; ZeRO < 3 does
            # not partition parameters, so only the optimizer moves
            sink.set("parallelism.cpu_offload", "params" if stage == 3 else "optimizer",
                     "--offload")
    mb = f"per_device_{'training' if rlhf else 'train'}_batch_size"
    if mb in names:
        sink.set("training.micro_batch_size", sink.int_(f"--{mb}", take(mb)), f"--{mb}")
    gc = f"{pre}gradient_checkpointing"
    if gc in names and sink.bool_(f"--{gc}", take(gc)):
        sink.set("training.activation_checkpointing", "full", f"--{gc}")
    lora = f"{pre}lora_dim"
    rank = sink.int_(f"--{lora}", take(lora), minimum=0) if lora in names else 0
    module = f"{pre}lora_module_name"
    only = "only_optimize_lora" in names and sink.bool_("--only_optimize_lora",
                                                         take("only_optimize_lora"))
    if rank > 0 and only:
        sink.set("training.technique", "lora", f"--{lora}+--only_optimize_lora")
        sink.set("training.lora_rank", rank, f"--{lora}")
        # dschat/utils/module/lora.py convert_linear_layer_to_lora: every nn.Linear whose
        # name contains --lora_module_name (default "decoder.layers."): the decoder's linears
        sink.set("training.lora_target_modules", ["all-linear"],
                 f"--{module}" if module in names else f"--{lora}")
        take(module)
    elif rank > 0:
        sink.set("training.technique", "full", f"--{lora} without --only_optimize_lora")
        sink.unmodelled(f"--{lora}", f"LoRA adapters of rank {rank} are added but the base "
                        "weights stay trainable (no --only_optimize_lora): estimated as full "
                        "fine-tuning without the adapters' extra parameters")
        if module in names:
            take(module)
            sink.unmodelled(f"--{module}", "the modules those adapters go on; not counted "
                            "(full fine-tuning, see --lora_dim)")
    elif lora in names:
        sink.ignore(f"--{lora}", "0: no LoRA")
    if module in names and module not in ("",) and rank == 0:
        take(module)
        sink.ignore(f"--{module}", "no LoRA (--lora_dim 0)")
    if rlhf:
        for name in [n for n in names if n.startswith("critic_") and n not in (
                "critic_learning_rate", "critic_weight_decay", "critic_dropout")]:
            take(name)
            sink.unmodelled(f"--{name}", "DeepSpeed-Chat step 3 also trains the critic and "
                            "holds the reference and reward models; the estimate is for the "
                            "actor alone")
        for name in ("enable_hybrid_engine", "offload_reference_model", "inference_tp_size",
                     "tp_gather_partition_size", "generation_batches",
                     "per_device_generation_batch_size", "ppo_epochs", "enable_ema",
                     "enable_mixed_precision_lora", "unsupervised_dataset_name"):
            if name in names:
                take(name)
                sink.unmodelled(f"--{name}", "RLHF generation / reference-model setting; "
                                "the estimate is for the actor's training step alone")
