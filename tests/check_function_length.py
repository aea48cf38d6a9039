#!/usr/bin/env python3
"""The function-length check (ctest's `function_length` test).

STYLE.md asks that a function fit on a screen. This script fails, naming each one, when a C++
function body under src/ spans more than MAX_LINES lines, counted from the line of its opening
brace to the line of its closing brace. CUDA kernels and device functions (__global__, __device__)
are exempt: a kernel is one launch and often reads best whole.

How it finds functions without a compiler: comments, string and character literals and preprocessor
lines are blanked out (newlines kept, so line numbers hold); then a scan over the braces keeps the
text since the last `;`, `{` or `}` at namespace or class scope (the "head"). A `{` opens
  - a scope it descends into when the head names a namespace, class, struct, union or `extern`;
  - a function body when the head has a parameter list and ends with `)`, a qualifier
    (const, noexcept, override, ...) or a trailing return type, or ends a constructor's
    member-initialiser list;
  - anything else (an initialiser, an enum, a member's brace default) is skipped whole.
A lambda or local class inside a function counts as part of that function.
Usage: check_function_length.py [repository root]
"""
import pathlib
import re
import sys

MAX_LINES = 80
SUFFIXES = {".cpp", ".h", ".cu", ".cuh", ".hpp", ".cc"}


QUALIFIERS = {"const", "noexcept", "override", "final", "mutable", "volatile", "try", "&", "&&"}
SCOPE = re.compile(r"(namespace|class|struct|union|extern)\b")
TEMPLATE = re.compile(r"^\s*template\s*<")


def blank(text):
    """The text with comments, literals and preprocessor lines turned to spaces, newlines kept."""
    out = []
    i, n = 0, len(text)
    keep_nl = lambda s: re.sub(r"[^\n]", " ", s)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and re.match(r"[ \t]*#", text[i:i + 200]):
            j = i
            while True:  # a directive runs on over backslash-newlines
                e = text.find("\n", j)
                e = n if e < 0 else e
                if e > 0 and text[e - 1] == "\\" and e < n:
                    j = e + 1
                    continue
                break
            out.append(keep_nl(text[i:e]))
            i = e
            continue
        at_line_start = c == "\n"
        if text.startswith("//", i):
            e = text.find("\n", i)
            e = n if e < 0 else e
            out.append(" " * (e - i))
            i = e
        elif text.startswith("/*", i):
            e = text.find("*/", i + 2)
            e = n if e < 0 else e + 2
            out.append(keep_nl(text[i:e]))
            i = e
        elif (m := re.match(r'(?:u8|u|U|L)?R"([^(\s]*)\(', text[i:i + 40])) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            e = text.find(")" + m.group(1) + '"', i + m.end())
            e = n if e < 0 else e + len(m.group(1)) + 2
            out.append(keep_nl(text[i:e]))
            i = e
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum() and text[i + 1:i + 2].isalnum():
                out.append(c)  # a digit separator: 1'000'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def match_brace(text, i):
    """The index of the `}` that closes the `{` at i."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def strip_template(head):
    """The head without a leading `template <...>` (its default arguments may hold `=`)."""
    m = TEMPLATE.match(head)
    if not m:
        return head
    depth, i = 1, m.end()
    while i < len(head) and depth:
        depth += {"<": 1, ">": -1}.get(head[i], 0)
        i += 1
    return strip_template(head[i:])


def opens_scope(head):
    """Whether a `{` after this head opens a namespace, class, struct, union or extern block."""
    h = re.sub(r"alignas\s*\([^)]*\)", "", strip_template(head)).strip()
    m = SCOPE.match(h)
    return m is not None and (m.group(1) in ("namespace", "extern") or "(" not in h)


def top_level(head):
    """The head with everything inside () and [] dropped, so that `=` and `:` found are its own."""
    out, depth = [], 0
    for c in head:
        if c in "([":
            depth += 1
        elif c in ")]" and depth:
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


def opens_function(head):
    """Whether a `{` after this head opens a function body (see the module's note)."""
    head = strip_template(head)
    if "(" not in head or "=" in top_level(head).replace("operator=", "").replace("==", ""):
        return False
    tail = head.rstrip()
    if tail.endswith(")") or tail.endswith("}"):
        return True
    words = re.findall(r"[A-Za-z_]\w*|&&|&", tail)
    if words and words[-1] in QUALIFIERS:
        return True
    return "->" in tail[tail.rfind(")"):]


def in_initialiser_list(head):
    """Whether the head is a constructor's `) : member` list, where `member{` is a brace initialiser."""
    close = head.rfind(")")
    return close >= 0 and re.search(r"(?<!:):(?!:)", head[close:]) is not None and not head.rstrip().endswith(("}", ")"))


def long_functions(path, text):
    """(name, first line, lines) of each function body in the text longer than MAX_LINES."""
    code = blank(text)
    found, head_start, i = [], 0, 0
    line_of = lambda k: code.count("\n", 0, k) + 1
    while i < len(code):
        c = code[i]
        if c in ";}":
            head_start = i + 1
        elif c == "{":
            head = code[head_start:i]
            if opens_scope(head):
                head_start = i + 1  # descend into the namespace or class
            elif in_initialiser_list(head):
                i = match_brace(code, i) + 1  # a member's brace initialiser; the head goes on
                continue
            else:
                end = match_brace(code, i)
                if opens_function(head) and not re.search(r"__global__|__device__", head):
                    lines = line_of(end) - line_of(i) + 1
                    if lines > MAX_LINES:
                        name = re.findall(r"([~\w:]+(?:operator\S*)?)\s*\(", head)
                        found.append((name[0] if name else "?", line_of(i), lines))
                i = end + 1
                head_start = i
                continue
        i += 1
    return found


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    errors = []
    for path in sorted((root / "src").rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.suffix not in SUFFIXES:
            continue
        for name, line, lines in long_functions(rel, path.read_text(errors="replace")):
            errors.append(f"{rel}:{line}: {name} is {lines} lines (more than {MAX_LINES}); split it into functions with one job")
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"function_length: {len(errors)} functions over {MAX_LINES} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
