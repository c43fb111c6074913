"""Start-up time: typer builds a parameter's pydantic adapter only for a value that needs one.

typer 0.29 checks every parameter's value with a pydantic ``TypeAdapter`` that it builds on the
parameter's first use, even when the value is None (an option not given, or ``--help`` and the
completion options of every group). A None value comes back unchanged (``()`` for a parameter
taking several values) without the adapter being used, yet building it imports pydantic and
costs about 0.1 s of CPU. So ``kmq queue list``, whose parameters are flags that typer passes
through, paid that for nothing.

:func:`defer_value_adapters` makes typer build the adapter when a value other than None arrives.
Every value that is given is still checked by typer's own adapter, with its error messages:
only the building moves.
"""

from __future__ import annotations

from typing import Any

__all__ = ["defer_value_adapters"]


class _DeferredRuntimeParam:
    """Stands in for typer's ``RuntimeParam`` until a parameter gets a value to check.

    Args:
        owner (typer.core._TyperParameter): the parameter whose adapter this defers.
        build (Callable): typer's own ``get_runtime_param``, which builds and caches it.
    """

    def __init__(self, owner: Any, build: Any) -> None:
        self._owner = owner
        self._build = build

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        from typer._coercion import RuntimeParam

        # typer's own coerce: None (or () for several values) is returned before any checking,
        # and anything else reaches _coerce_value below.
        return RuntimeParam.coerce(self, value, param=param, ctx=ctx)  # type: ignore[arg-type]

    def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
        return self._build(self._owner)._coerce_value(value, param=param, ctx=ctx)


def defer_value_adapters() -> None:
    """Make typer build each parameter's pydantic adapter on its first value that is not None
    (idempotent).

    typer has no setting for this, so the one method that hands out the adapter is wrapped; if
    a later typer renames it or its coercion class, nothing is wrapped and the adapters are
    built as typer does (``tests/unit/test_cli_startup.py`` checks that ``kmq queue list``
    imports no pydantic, so that does not go unnoticed).
    """
    try:
        from typer._coercion import RuntimeParam
        from typer.core import _TyperParameter
    except ImportError:
        return
    build = getattr(_TyperParameter, "get_runtime_param", None)
    if build is None or getattr(build, "_kmq_deferred", False) or not hasattr(RuntimeParam,
                                                                               "coerce"):
        return

    def get_runtime_param(self: Any) -> Any:
        if getattr(self, "_runtime_param", None) is not None:
            return self._runtime_param
        return _DeferredRuntimeParam(self, build)

    get_runtime_param._kmq_deferred = True  # type: ignore[attr-defined]
    _TyperParameter.get_runtime_param = get_runtime_param  # type: ignore[method-assign]
