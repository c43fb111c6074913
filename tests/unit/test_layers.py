"""No import cycle in ``facade`` or ``spark_connector``, and the layers docs/design.md states.

Every import counts: module level, inside functions (lazy imports) and under
``TYPE_CHECKING``, because a cycle of annotations is still a cycle of concepts (a lower module
that names the queue manager depends on it). Lower modules name what they need through the
small protocols of :mod:`facade.queues.interfaces` instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("facade", "spark_connector")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES
            for path in sorted((ROOT / package).rglob("*.py"))}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # ``from facade import avro`` imports the submodule facade.model.avro.
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                         for alias in node.names)
    return {module for module in found if module in known and module != name}


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (lazy and TYPE_CHECKING imports included)."""
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each is a set of
    modules that all reach each other, so every one of them is on a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One concrete cycle per component, through its first module."""
    return [_one_cycle(graph, set(component)) for component in _components(graph)]


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A concrete cycle through the component's first module, for the failure message."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for target in sorted(graph[node] & component):
            if target == start:
                return paths[node] + [start]
            if target not in paths:
                paths[target] = paths[node] + [target]
                frontier.append(target)
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def test_the_graph_sees_lazy_and_type_checking_imports() -> None:
    graph = import_graph()
    assert "facade.errors" in graph["facade.model.formatnames"]
    assert "facade.manager" in graph["facade.service"]
    # facade/__init__.py imports its names only under TYPE_CHECKING
    assert "facade.manager" in graph["facade"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]


def test_no_import_cycle() -> None:
    graph = import_graph()
    report = [f"{', '.join(component)}\n  e.g. {' -> '.join(_one_cycle(graph, set(component)))}"
              for component in _components(graph)]
    assert not report, ("modules on import cycles (counting lazy and TYPE_CHECKING imports):\n"
                        + "\n".join(report))


def documented_layers() -> dict[str, int]:
    """docs/design.md's "Layers" list: module name (``name.*``: a package and its modules) ->
    layer number, 1 the lowest."""
    import re

    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    layers: dict[str, int] = {}
    for number, body in re.findall(r"^(\d+)\. (.*?)(?=^\d+\. |\Z)", section, re.M | re.S):
        for name in re.findall(r"`((?:facade|spark_connector)[\w.]*(?:\.\*)?)`", body):
            assert layers.get(name, int(number)) == int(number), f"{name} is in two layers"
            layers[name] = int(number)
    return layers


def _layer_of(module: str, layers: dict[str, int]) -> int | None:
    if module in layers:
        return layers[module]
    matches = [name for name in layers if name.endswith(".*")
               and (module == name[:-2] or module.startswith(name[:-1]))]
    return layers[max(matches, key=len)] if matches else None


def test_every_module_has_a_documented_layer() -> None:
    layers = documented_layers()
    assert sorted(set(layers.values())) == list(range(1, 10))
    assert layers["facade.manager"] == 8 and layers["facade.queues.*"] == 7
    missing = sorted(m for m in import_graph() if _layer_of(m, layers) is None)
    assert not missing, f"modules missing from docs/design.md's Layers list: {missing}"


def test_no_module_imports_a_higher_layer() -> None:
    layers = documented_layers()
    upward = [f"{module} (layer {_layer_of(module, layers)}) imports {target} "
              f"(layer {_layer_of(target, layers)})"
              for module, targets in sorted(import_graph().items()) for target in sorted(targets)
              if (_layer_of(target, layers) or 0) > (_layer_of(module, layers) or 0)]
    assert not upward, "imports that go up a layer (docs/design.md, Layers):\n" + "\n".join(upward)


def test_the_manager_is_below_nothing_it_wires() -> None:
    graph = import_graph()
    wired = ("facade.queues.queue", "facade.queues.systemoutputs", "facade.queues.transmission", "facade.queues.resolution",
             "facade.queues.cursor", "facade.queues.peeklock")
    assert [m for m in wired if "facade.manager" in graph[m]] == []


def _private_uses(path: Path) -> list[str]:
    """``something._name`` in ``path`` where something is not ``self``/``cls``: a reach into
    another object's (or module's) internals."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    return found


def test_cursor_and_spark_reach_into_no_internals() -> None:
    """One receive path: the cursor walks its queue through the ``QueueReader`` protocol and
    Spark uses the facade's public modules (``facade.queues.receiving``...), not
    ``MessageQueue``'s internals."""
    paths = [ROOT / "facade" / "queues" / "cursor.py", *sorted((ROOT / "spark_connector").glob("*.py"))]
    # PySpark's py4j gateway has no public name: the only way to ask the JVM for a class.
    pyspark_gateway = ("._jvm", "._jsparkSession")
    found = [use for path in paths for use in _private_uses(path)
             if not use.endswith(pyspark_gateway)]
    assert not found, "private members used from outside their object:\n" + "\n".join(found)


def test_each_layer_folder_says_what_it_may_import() -> None:
    """Each folder below the queue manager names, in its ``__init__`` docstring, the folders
    below it as the Layers list orders them, so a reader of one folder learns its rule without
    opening design.md. (The CLI and the demo are on top: they may import anything.)"""
    import re

    layers = documented_layers()
    folders = {name[:-2]: number for name, number in layers.items()
               if name.endswith(".*") and name.startswith("facade.")
               and number < layers["facade.manager"]}
    wrong = []
    for folder, number in sorted(folders.items()):
        path = ROOT / Path(*folder.split(".")) / "__init__.py"
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if "May import:" not in doc:
            wrong.append(f"{folder}: no 'May import:' in its docstring")
            continue
        named = set(re.findall(r"facade\.\w+", doc.split("May import:", 1)[1]))
        below = {f for f, n in folders.items() if n < number}
        if named != below:
            wrong.append(f"{folder}: names {sorted(named)}, the Layers list puts {sorted(below)} "
                         "below it")
    assert not wrong, "\n".join(wrong)
