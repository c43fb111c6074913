r"""Run the code blocks of a Markdown document as a reader would: top to bottom, in one fresh
``KMQ_HOME``, against the test broker (``tests/integration/test_docs.py``,
``tests/spark/test_docs_spark.py``).

What runs:

* every fenced ```` ```python ```` block, each in its own interpreter (a reader copies one block,
  so each must stand alone), or all of a document's blocks in one interpreter, in order, with
  ``shared=True`` (docs/spark.md: its first block builds the SparkSession the others use);
* every fenced ```` ```bash ```` block, with ``bash -euo pipefail`` and ``kmq`` on ``PATH``.

A block that must not run is marked on the line right before its fence, with the reason::

    <!-- docs-test: skip (the reason) -->

(an HTML comment: it is invisible on GitHub). A marker without a reason is an error.

Results written in comments are checked: a Python expression statement whose line ends in a
comment that starts with a Python literal (``q.receive(timeout=5).body   # b'urgent': ...``)
must evaluate to that literal; the run fails naming the document line otherwise.
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CodeBlock", "code_blocks", "run_blocks", "with_checks"]

_FENCE = re.compile(r"^```(\w+)\s*$")
_MARKER = re.compile(r"^<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->\s*$")
#: Seconds one block may run (a Spark block starts a JVM on a busy 2-core machine).
BLOCK_TIMEOUT = 600.0

_CHECK_PRELUDE = '''
def _docs_check(value, expected, line):
    if value != expected:
        raise AssertionError(f"{DOC} line {line}: the comment says {expected!r}, got {value!r}")
'''


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block.

    Attributes:
        language (str): ``python`` or ``bash`` (others are not collected).
        code (str): its text.
        line (int): the document line of its first code line (1-based).
        skip (str | None): the reason given by a ``docs-test: skip`` marker, else None.
    """

    language: str
    code: str
    line: int
    skip: str | None


def code_blocks(path: Path) -> list[CodeBlock]:
    """The python and bash blocks of a Markdown file, in order.

    Raises:
        ValueError: a marker has no reason or an unknown verb, or a fence is not closed.
    """
    lines = path.read_text().splitlines()
    blocks: list[CodeBlock] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        end = next((j for j in range(index + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{path}:{index + 1}: the fence is not closed")
        if fence.group(1) in ("python", "bash"):
            blocks.append(CodeBlock(fence.group(1), "\n".join(lines[index + 1:end]) + "\n",
                                    index + 2, _skip_reason(path, lines, index)))
        index = end + 1
    return blocks


def _skip_reason(path: Path, lines: list[str], fence_index: int) -> str | None:
    marker = _MARKER.match(lines[fence_index - 1]) if fence_index else None
    if marker is None:
        return None
    verb, reason = marker.groups()
    if verb != "skip" or not reason:
        raise ValueError(f"{path}:{fence_index}: write <!-- docs-test: skip (reason) -->")
    return reason


def with_checks(code: str, first_line: int) -> str:
    """``code`` with every expression statement whose line ends in a literal comment turned
    into a check of that value (see the module doc)."""
    comments = _comments(code)
    tree = ast.parse(code)

    class Checks(ast.NodeTransformer):
        def visit_Expr(self, node: ast.Expr) -> ast.AST:
            expected = _literal(comments.get(node.end_lineno, ""))
            if expected is None:
                return node
            call = ast.Call(ast.Name("_docs_check", ast.Load()),
                            [node.value, ast.Constant(expected[0]),
                             ast.Constant(first_line + node.lineno - 1)], [])
            return ast.copy_location(ast.Expr(call), node)

    return ast.unparse(ast.fix_missing_locations(Checks().visit(tree)))


def _comments(code: str) -> dict[int, str]:
    """Line number (1-based) -> the text of the comment ending that line."""
    tokens = tokenize.generate_tokens(io.StringIO(code).readline)
    return {t.start[0]: t.string[1:].strip() for t in tokens if t.type == tokenize.COMMENT}


def _literal(comment: str) -> tuple[object] | None:
    """The literal a comment starts with (up to a ``:`` or the end), in a 1-tuple; else None."""
    ends = [i for i, char in enumerate(comment) if char == ":"] + [len(comment)]
    for end in ends:
        try:
            return (ast.literal_eval(comment[:end].strip()),)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def run_blocks(path: Path, env: dict[str, str], cwd: Path, *, shared: bool = False,
               leave_out: set[int] = frozenset()) -> list[CodeBlock]:
    """Run the document's blocks in order (see the module doc).

    Args:
        path (Path): the Markdown file.
        env (dict[str, str]): the environment (``KMQ_HOME``, ``KMQ_BOOTSTRAP_SERVERS``, ...).
        cwd (Path): the working directory of every block.
        shared (bool): run the python blocks in one interpreter, in order.
        leave_out (set[int]): first lines of blocks the caller cannot run here.

    Returns:
        list[CodeBlock]: the blocks that ran.

    Raises:
        AssertionError: a block failed; the message names the document line, with its output.
    """
    env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    ran: list[CodeBlock] = []
    python: list[CodeBlock] = []
    for block in code_blocks(path):
        if block.skip is not None or block.line in leave_out:
            continue
        if block.language == "python" and shared:
            python.append(block)
            continue
        _run(path, block, [block], env, cwd)
        ran.append(block)
    if python:
        _run(path, python[0], python, env, cwd)
        ran += python
    return ran


def _run(path: Path, first: CodeBlock, blocks: list[CodeBlock], env: dict[str, str],
         cwd: Path) -> None:
    if first.language == "bash":
        argv = ["bash", "-euo", "pipefail", "-c", first.code]
    else:
        source = f"DOC = {path.name!r}\n{_CHECK_PRELUDE}\n" + "\n".join(
            with_checks(b.code, b.line) for b in blocks)
        argv = [sys.executable, "-c", source]
    result = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                            timeout=BLOCK_TIMEOUT, check=False)
    if result.returncode != 0:
        where = ", ".join(str(b.line) for b in blocks)
        raise AssertionError(
            f"{path.name} block at line {where} ({first.language}) exited "
            f"{result.returncode}\n--- stdout\n{result.stdout[-4000:]}\n--- stderr\n"
            f"{result.stderr[-6000:]}")
