#!/usr/bin/env python3
"""Tests tests/check_function_length.py on a scratch tree: a function, method or constructor (brace
member initialisers included) one line over the limit fails naming its file, line and name; one at
the limit passes; kernels, long initialisers, and braces inside comments and strings are not
counted.
Usage: check_function_length_test.py SCRATCH
"""
import pathlib
import shutil
import subprocess
import sys

here = pathlib.Path(__file__).resolve().parent
scratch = pathlib.Path(sys.argv[1])
limit = 80


def body(lines):
    """A function body spanning `lines` lines from `{` to `}`, with braces in comments and strings."""
    inner = ['  int x = 0;  // a { in a comment', '  const char* s = "}{";', "  /* } */ x += s[0];"]
    inner += ["  x += 1;"] * (lines - 2 - len(inner))
    return "{\n" + "\n".join(inner) + "\n}\n"


def run(files):
    shutil.rmtree(scratch, ignore_errors=True)
    for rel, text in files.items():
        (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
        (scratch / rel).write_text(text)
    p = subprocess.run([sys.executable, str(here / "check_function_length.py"), str(scratch)],
                       capture_output=True, text=True)
    return p.returncode, p.stderr


def expect(cond, what, out):
    if not cond:
        sys.exit(f"check_function_length_test: {what}\n{out}")


ok = {
    "src/a/fine.cpp": "namespace n {\nint at_limit(int y) " + body(limit) + "}\n",
    "src/a/kernel.cu": "template <int N>\n__global__ void k(float* p) " + body(limit + 20)
                       + "__device__ inline float d(float v) " + body(limit + 20),
    "src/a/table.cpp": "const int table[] = {\n" + "  1,\n" * (limit + 20) + "};\n"
                       + "enum class E : int { a, b };\n",
}
rc, out = run(ok)
expect(rc == 0, f"a tree with no function over {limit} lines failed (rc {rc})", out)

too_long = dict(ok)
too_long["src/b/long.cpp"] = ("namespace n {\nnamespace {\nint helper() { return 1; }\n}  // namespace\n"
                              "struct S {\n  S(int v) : v_{v}, w_(v) " + body(limit + 1) + "  int v_{0}, w_;\n"
                              "  int method() const noexcept " + body(limit + 1) + "};\n"
                              "auto free_fn(int a) -> int " + body(limit + 1)
                              + "template <typename T, typename = void>\nstruct S make_s(T t) " + body(limit + 1) + "}\n")
rc, out = run(too_long)
expect(rc == 1, f"functions of {limit + 1} lines passed (rc {rc})", out)
for needle in (f"src/b/long.cpp:6: S is {limit + 1} lines", f"src/b/long.cpp:{6 + limit + 2}: method is",
               f"free_fn is {limit + 1} lines", f"make_s is {limit + 1} lines", "4 functions over"):
    expect(needle in out, f"the report lacks '{needle}'", out)
expect("fine.cpp" not in out and "kernel.cu" not in out and "table" not in out,
       "a function that is allowed was blamed", out)
print("check_function_length_test: ok")
