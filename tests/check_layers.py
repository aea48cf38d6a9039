#!/usr/bin/env python3
"""The layering check (ctest's `layering` test).

docs/ARCHITECTURE.md holds the one table of allowed dependencies between the layers under src/
(between the `layers:begin` and `layers:end` markers) and draws the same graph (the mermaid block
between `graph:begin` and `graph:end`). This script fails when:
  - a folder under src/ has no row in the table, or a row names no folder;
  - the drawn graph is not the table: its edges, closed transitively, must equal the table's
    allowed pairs, and every drawn edge must be an allowed pair;
  - a source file includes "layer/..." from a layer its own layer may not include;
  - a layer's CMakeLists.txt links a nanoddp library its layer may not depend on;
  - the DDP engine, model or trainer include a process-group backend (Gloo, MPI, NCCL) instead of
    comm/process_group.h, or a kernel backend / CUDA header instead of ops/ops.h.
Usage: check_layers.py [repository root]
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
doc = (root / "docs" / "ARCHITECTURE.md").read_text()
src = root / "src"
errors = []


def between(text, begin, end):
    m = re.search(re.escape(begin) + r"(.*?)" + re.escape(end), text, re.S)
    if not m:
        sys.exit(f"layering: docs/ARCHITECTURE.md lacks the {begin} ... {end} markers")
    return m.group(1)


# The table: | layer | may include | ... (the first two columns count).
allowed = {}
for line in between(doc, "<!-- layers:begin -->", "<!-- layers:end -->").splitlines():
    cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
    if len(cells) < 2 or not re.fullmatch(r"[a-z_]+", cells[0]) or cells[0] == "layer":
        continue
    deps = set() if cells[1] in ("", "-", "—") else {d.strip().strip("`") for d in cells[1].split(",")}
    allowed[cells[0]] = deps

folders = {p.name for p in src.iterdir() if p.is_dir()}
for f in sorted(folders - allowed.keys()):
    errors.append(f"src/{f}/ has no row in docs/ARCHITECTURE.md's layer table")
for layer in sorted(allowed.keys() - folders):
    errors.append(f"the layer table names {layer}, but there is no src/{layer}/")
for layer, deps in allowed.items():
    for d in sorted(deps - allowed.keys()):
        errors.append(f"the layer table lets {layer} include {d}, which is not a layer")

# The drawn graph: `a --> b` edges inside the mermaid block.
edges = set(re.findall(r"\b([a-z_]+)\s*-->\s*([a-z_]+)\b", between(doc, "<!-- graph:begin -->", "<!-- graph:end -->")))


def closure(pairs):
    reach = {}
    for a, b in pairs:
        reach.setdefault(a, set()).add(b)
    changed = True
    while changed:
        changed = False
        for a in list(reach):
            extra = set().union(*(reach.get(b, set()) for b in reach[a])) - reach[a]
            if extra:
                reach[a] |= extra
                changed = True
    return {(a, b) for a in reach for b in reach[a]}


table_pairs = {(a, b) for a, deps in allowed.items() for b in deps}
for a, b in sorted(edges - table_pairs):
    errors.append(f"the graph draws {a} --> {b}, which the layer table does not allow")
for a, b in sorted(table_pairs - closure(edges)):
    errors.append(f"the layer table allows {a} -> {b}, but the graph has no path from {a} to {b}")
for a, b in sorted(closure(edges) - table_pairs):
    errors.append(f"the graph reaches {b} from {a}, which the layer table does not allow")

# Includes. "nanoddp/build_config.h" is the generated configuration header, open to every layer.
include_re = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"', re.M)
for path in sorted(src.rglob("*")):
    if path.suffix not in (".h", ".cpp", ".cu", ".cuh"):
        continue
    layer = path.relative_to(src).parts[0]
    if layer not in allowed:
        continue
    text = path.read_text(errors="replace")
    for m in include_re.finditer(text):
        target = m.group(1)
        if target in (layer, "nanoddp") or target not in allowed:
            continue
        if target not in allowed[layer]:
            errors.append(f"{path.relative_to(root)}: {layer} includes {target}/{m.group(2)} "
                          f"(the layer table lets {layer} include only: {', '.join(sorted(allowed[layer])) or 'nothing'})")
    if layer in ("ddp", "model", "train"):
        for m in re.finditer(r'#include\s+"comm/(gloo|mpi|nccl)_[^"]*"', text):
            errors.append(f"{path.relative_to(root)}: {layer} includes a process-group backend "
                          f"({m.group(0)[10:]}) instead of comm/process_group.h")
        for m in re.finditer(r'#include\s+("ops/(cpu|cuda)/[^"]*"|<(cu|nccl|cudnn)[^>]*>)', text):
            errors.append(f"{path.relative_to(root)}: {layer} includes a kernel backend or CUDA header "
                          f"({m.group(1)}) instead of ops/ops.h")

# Link dependencies of each layer's library: nanoddp_<layer> in its CMakeLists.txt.
for layer in sorted(allowed.keys() & folders):
    for cm in (src / layer).rglob("CMakeLists.txt"):
        for m in re.finditer(r"target_link_libraries\(\s*(\S+)([^)]*)\)", cm.read_text()):
            # The first word is the target (nanoddp_ops_cuda is ops; cli's is the binary, nanoddp).
            for lib in re.findall(r"\bnanoddp_([a-z]+)", m.group(2)):
                if lib != layer and lib in allowed and lib not in allowed[layer]:
                    errors.append(f"{cm.relative_to(root)}: {layer} links nanoddp_{lib}, which the layer table does not allow")

for e in errors:
    print("layering:", e)
if errors:
    sys.exit(1)
print(f"layering: ok ({len(allowed)} layers, {len(table_pairs)} allowed dependencies, {len(edges)} edges drawn)")
