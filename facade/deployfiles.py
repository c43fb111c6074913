"""Files of the repository's ``deploy/`` tree (LDAP schema, the local broker's POM), found in a
source checkout or in an installed wheel."""

from __future__ import annotations

from pathlib import Path

from facade.errors import ConfigurationError

__all__ = ["deploy_file"]


def deploy_file(relative: str) -> Path:
    """Locate a file of the repository's ``deploy/`` tree.

    Wheels carry it as ``facade/_deploy`` (pyproject force-include); a source checkout has it at
    the repository root.

    Args:
        relative (str): path below ``deploy/``, e.g. ``"ldap/bootstrap.ldif"``.

    Raises:
        ConfigurationError: the file is in neither place (a broken install: reinstall kmq).
    """
    package_root = Path(__file__).resolve().parent
    for root in (package_root / "_deploy", package_root.parent / "deploy"):
        candidate = root / relative
        if candidate.is_file():
            return candidate
    raise ConfigurationError(
        f"kmq's deploy file {relative!r} is missing (looked in {package_root / '_deploy'} and "
        f"{package_root.parent / 'deploy'})",
        hint="reinstall kmq (pip install --force-reinstall kmq) or restore deploy/ in the checkout",
    )
