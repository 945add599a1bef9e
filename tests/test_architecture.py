"""The package's layers only look down: a module imports from its own layer or the layers below it, never above.

The order is the pipeline's (docs/architecture.md): the base modules every layer uses, then tokens, resources,
methods, surgery, training, evaluation, transfer, bench, demo, the smaller commands as library calls, and the
command line on top. A module that is not in
this table fails the test, so a new module is placed in a layer when it is written.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "langswap"

LAYERS = [
    ("base", ["__init__", "errors", "config", "files", "locking", "numerics", "kernels", "masking", "batching",
              "progress", "plots", "models", "registry", "reports", "records", "modelcard"]),
    ("tokens", ["tokens", "chunks"]),
    ("resources", ["resources"]),
    ("methods", ["methods"]),
    ("surgery", ["surgery", "checkpoint", "calibration_move", "frequency_line", "start_rows"]),
    ("training", ["training"]),
    ("evaluation", ["evaluation", "head_inputs"]),
    ("transfer", ["transfer", "enrich"]),
    ("bench", ["bench"]),
    ("demo", ["demo"]),
    ("commands", ["commands"]),
    ("cli", ["cli", "__main__"]),
]
LEVEL = {name: level for level, (_, names) in enumerate(LAYERS) for name in names}


def layer_of(module: str) -> int:
    """`langswap.resources.vectors` -> the level of `resources`; a package's own `__init__` counts as the base."""
    parts = module.split(".")[1:] or ["__init__"]
    if parts[0] not in LEVEL:
        raise AssertionError(f"module langswap.{'.'.join(parts)} is in no layer: add it to LAYERS in "
                             f"{Path(__file__).name} and to docs/architecture.md")
    return LEVEL[parts[0]]


def imports_of(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found += [(node.lineno, name) for name in names[:1] if name.split(".")[0] == "langswap"]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "langswap"]
    return found


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        yield ".".join(relative.parts), path


@pytest.mark.parametrize("module,path", list(modules()), ids=lambda value: str(value) if isinstance(value, str)
                         else "")
def test_imports_only_look_down(module, path):
    own = layer_of(module)
    upward = [f"line {line}: {target} ({LAYERS[layer_of(target)][0]})" for line, target in imports_of(path)
              if layer_of(target) > own]
    assert not upward, f"{module} ({LAYERS[own][0]}) imports from a layer above it: " + "; ".join(upward)


def test_every_module_has_a_layer():
    for module, _ in modules():
        layer_of(module)


def module_level_imports(path: Path, names: set[str]) -> set[str]:
    """The langswap modules `path` imports at module level, those under `if` (TYPE_CHECKING) included."""
    found = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.update(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in names else node.module
                             for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return found & names


def test_no_two_modules_import_each_other_at_module_level():
    """Not even for type annotations: a loop makes the import order matter and hides which module is the lower."""
    paths = {module.removesuffix(".__init__"): path for module, path in modules()}
    graph = {module: module_level_imports(path, set(paths)) - {module} for module, path in paths.items()}
    state = {}  # module -> "open" while its imports are explored, "done" after

    def explore(module, chain):
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                loop = chain[chain.index(target):] + [target]
                raise AssertionError("import loop: " + " -> ".join(loop))
            if target not in state:
                explore(target, chain + [target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            explore(module, [module])


def test_no_two_modules_import_each_other():
    """No import cycle, counting imports inside functions too: a module that needs another's code either sits below
    it or shares a module below both (training/sources.py reads documents through training/data.py, never back)."""
    names = {module for module, _ in modules()}
    graph: dict[str, set[str]] = {}
    for module, path in modules():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named = {f"{node.module}.{alias.name}" for alias in node.names} & names
                targets |= named or ({node.module} & names) or ({f"{node.module}.__init__"} & names)
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names} & names
        graph[module] = targets - {module}
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in cycles[:5])


LONGEST_FUNCTION = 120  # lines; a longer one is split into steps a reader follows in order


def test_no_function_is_longer_than_a_reader_can_follow():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST_FUNCTION:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "split these into named steps: " + "; ".join(long)
