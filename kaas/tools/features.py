"""``kaas features describe|upgrade|downgrade|disable``: the cluster's feature levels
(KIP-584), like Apache's ``kafka-features``.

``describe`` reads ApiVersions (v4) of any broker: the levels it supports and the
finalized ones, with their epoch. The others send UpdateFeatures (v2) to the controller,
which validates the whole request (``--dry-run``: validate only) and refuses it with
Apache's message when one update is invalid."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click
from kio.schema.api_versions.v4.request import ApiVersionsRequest
from kio.schema.api_versions.v4.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.update_features.v2.request import FeatureUpdateKey, UpdateFeaturesRequest
from kio.schema.update_features.v2.response import UpdateFeaturesResponse
from kio.static.primitive import i8, i16

from kaas import __version__
from kaas.domain.features import UpgradeType
from kaas.tools._wire import F, bootstrap_option, code_name, command_config_option, json_option, open_cluster
from kaas.tools.output import emit, table

METADATA_VERSIONS = {33: "4.4-IV2"}  # the metadata.version names of the levels kaas supports
COLUMNS = ("feature", "supported_min", "supported_max", "finalized", "epoch")


def _level(name: str, level: int | None) -> object:
    if level is None:
        return None
    return METADATA_VERSIONS.get(level, level) if name == "metadata.version" else level


def _parse(specs: Sequence[str]) -> list[tuple[str, int]]:
    out = []
    for spec in specs:
        name, eq, level = spec.partition("=")
        if not eq or not name or not level.lstrip("-").isdigit():
            raise click.BadParameter(f"{spec!r} is not FEATURE=LEVEL", param_hint="--feature")
        out.append((name.strip(), int(level)))
    if not out:
        raise click.UsageError("give at least one --feature FEATURE=LEVEL")
    return out


@click.group("features")
def features() -> None:
    """Feature levels (KIP-584): describe, upgrade, downgrade, disable."""


@features.command()
@bootstrap_option
@command_config_option
@json_option
def describe(bootstrap: str, command_config: Path | None, as_json: bool) -> None:
    """The features the brokers support and the cluster's finalized levels."""
    with open_cluster(bootstrap, command_config) as c:
        r: ApiVersionsResponse = c.call_any(ApiVersionsRequest(client_software_name="kaas-features",
                                                               client_software_version=__version__))
    if r.error_code != ErrorCode.none:
        raise click.ClickException(f"ApiVersions: {code_name(r.error_code)}")
    finalized = {f.name: f.max_version_level for f in r.finalized_features}
    rows = [{"feature": s.name, "supported_min": _level(s.name, s.min_version),
             "supported_max": _level(s.name, s.max_version), "finalized": _level(s.name, finalized.get(s.name)),
             "epoch": r.finalized_features_epoch}
            for s in sorted(r.supported_features, key=lambda s: s.name)]
    emit(rows, as_json, lambda: table(rows, COLUMNS))


def _update(bootstrap: str, command_config: Path | None, updates: list[tuple[str, int]], upgrade_type: int,
            dry_run: bool) -> None:
    req = UpdateFeaturesRequest(feature_updates=tuple(
        FeatureUpdateKey(feature=n, max_version_level=i16(lv), upgrade_type=i8(upgrade_type)) for n, lv in updates),
        validate_only=dry_run)
    with open_cluster(bootstrap, command_config) as c:
        c.metadata([])
        r: UpdateFeaturesResponse = c.call_controller(req)
    if r.error_code != ErrorCode.none:
        raise click.ClickException(f"{code_name(r.error_code)}: {r.error_message or ''}".rstrip(": "))
    verb = {UpgradeType.UPGRADE: "upgraded", UpgradeType.SAFE_DOWNGRADE: "downgraded",
            UpgradeType.UNSAFE_DOWNGRADE: "downgraded (unsafe)"}[upgrade_type]
    for name, level in updates:
        click.echo(f"{name} {'can be ' if dry_run else ''}{verb} to {level}"
                   + (" (disabled)" if level == 0 else ""))


def _update_options(f: F) -> F:
    f = click.option("--dry-run", is_flag=True, help="Validate only: nothing changes.")(f)
    f = click.option("--feature", "specs", multiple=True, metavar="FEATURE=LEVEL",
                     help="A feature and its new level, e.g. transaction.version=1 (repeatable).")(f)
    return command_config_option(bootstrap_option(f))


@features.command()
@_update_options
def upgrade(bootstrap: str, command_config: Path | None, specs: tuple[str, ...], dry_run: bool) -> None:
    """Raise features to the levels given."""
    _update(bootstrap, command_config, _parse(specs), UpgradeType.UPGRADE, dry_run)


@features.command()
@_update_options
@click.option("--unsafe", is_flag=True, help="An unsafe (lossy) downgrade.")
def downgrade(bootstrap: str, command_config: Path | None, specs: tuple[str, ...], dry_run: bool,
              unsafe: bool) -> None:
    """Lower features to the levels given (0 disables)."""
    _update(bootstrap, command_config, _parse(specs), UpgradeType.UNSAFE_DOWNGRADE if unsafe
            else UpgradeType.SAFE_DOWNGRADE, dry_run)


@features.command()
@_update_options
@click.option("--unsafe", is_flag=True, help="An unsafe (lossy) downgrade.")
def disable(bootstrap: str, command_config: Path | None, specs: tuple[str, ...], dry_run: bool,
            unsafe: bool) -> None:
    """Turn features off (level 0); give --feature FEATURE (or FEATURE=0)."""
    names = [s.partition("=")[0] for s in specs]
    _update(bootstrap, command_config, _parse([f"{n}=0" for n in names]),
            UpgradeType.UNSAFE_DOWNGRADE if unsafe else UpgradeType.SAFE_DOWNGRADE, dry_run)
