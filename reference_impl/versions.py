"""The PostgreSQL versions the model follows, and which one a server is.

Each version has its own model, following that version's own source: ``"18"`` (REL_18_STABLE,
checked against 18.6), ``"19"`` (REL_19_STABLE as branched) and ``"20devel"`` (the development
branch). ``"master"`` names the newest, so ``Settings(version="master")`` is the development
branch's model and says ``version == "20devel"``.

:func:`model_version_for` maps a server's ``server_version_num`` to its model; a version without
one is refused in one line (:class:`~reference_impl.errors.SettingError`).
"""

from __future__ import annotations

from .errors import SettingError

__all__ = ["MASTER", "VERSIONS", "VERSION_ALIASES", "canonical_version", "model_version_for"]

#: Versions with a model, oldest first.
VERSIONS: tuple[str, ...] = ("18", "19", "20devel")
#: The newest version, which ``"master"`` names.
MASTER = VERSIONS[-1]
VERSION_ALIASES: dict[str, str] = {"master": MASTER}
# server_version_num // 10000 -> model version
_BY_MAJOR = {18: "18", 19: "19", 20: "20devel"}


def _allowed() -> str:
    return ", ".join(VERSIONS) + f" (or master = {MASTER})"


def canonical_version(version: object) -> str:
    """``version`` as one of :data:`VERSIONS` (``"master"`` is the newest); else ``SettingError``."""
    if isinstance(version, str):
        v = VERSION_ALIASES.get(version.strip(), version.strip())
        if v in VERSIONS:
            return v
    raise SettingError(f"version = {version!r} has no model: allowed {_allowed()}")


def model_version_for(server_version_num: int) -> str:
    """The model of a server whose ``server_version_num`` is given (180006 -> ``"18"``)."""
    if isinstance(server_version_num, int) and not isinstance(server_version_num, bool):
        found = _BY_MAJOR.get(server_version_num // 10000)
        if found is not None:
            return found
    raise SettingError(
        f"server_version_num {server_version_num!r} is a PostgreSQL version without a model: "
        f"allowed 18.x, 19.x and 20devel ({_allowed()})"
    )
