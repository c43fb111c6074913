"""Help-text fixes applied to typer before the ``kmq`` commands are built.

typer 0.2x prints a type for every option in ``--help``, so a flag such as ``--json``, ``--yes``
or ``--recoverable/--express`` showed ``<bool>``: it takes no value, and the type read as if it
took one. :func:`hide_flag_types` leaves the type column empty for flags; options that take a
value keep theirs (``<int>``, ``SECONDS``...).
"""

from __future__ import annotations

from typing import Any

__all__ = ["hide_flag_types"]


def hide_flag_types() -> None:
    """Make ``--help`` show no type for boolean flags (idempotent).

    typer has no setting for this, so the one method that produces the type text is wrapped;
    if a later typer renames it, nothing is wrapped and help shows ``<bool>`` again (a test
    checks the help text, so that does not go unnoticed).
    """
    from typer.core import TyperOption

    original = getattr(TyperOption, "display_type_rich", None)
    if original is None or getattr(original, "_kmq_hides_flags", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        if getattr(self, "is_flag", False):
            return None
        return original(self, ctx)

    display_type_rich._kmq_hides_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]
