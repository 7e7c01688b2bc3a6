"""The node's features, listed once: each declares its REST routes, the record kinds it projects with the tables
holding their derived data, the state it installs on the app, and the work the app runs in the background.

node/app.py builds the application from `FEATURES`, in order: the routes' order is the OpenAPI document's and
the order aiohttp matches them in; background tasks start in this order once the node is open and stop in
reverse before it closes. Work done once per node is wrapped in `leader_only`: it runs in the process leading
the node (node/store/leader.py; on SQLite the one process), under its term's fence; the rest runs in every
process. Nothing registers itself on import: a feature is on the node because it is listed here.

The log's projectors and tables are joined once here too, into `LOG` (a `projections.Log`): `Node` gives it to
its `Database`, which gives it to every connection it opens, and `projections.append_many`, `rebuild` and
`snapshot` read it from the connection they run on. The store floor never imports this list; the CLI hands `LOG`
to what opens a connection of its own (`db.write_sync`, `bbs doctor`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from aiohttp import web

from node import routes as substrate_routes
from node.agents import routes as agent_routes
from node.default_mode import routes as default_mode_routes
from node.federation import routes as peer_routes
from node.feed import routes as feed_routes
from node.nlip import endpoint as nlip_endpoint
from node.push import routes as push_routes
from node.redaction import effects as redaction_effects
from node.redaction import routes as redaction_routes
from node.redaction import scrub as redaction_scrub
from node.redaction import store as redaction_store
from node.retention import job as retention_job
from node.spaces import routes as space_routes
from node.spaces import store as space_store
from node.spaces import vouched_set as space_vouched
from node.store import projections, void
from node.store.projections import Log, Projector, Screen, Switch
from node.trust import routes as trust_routes
from node.web import background
from node.web.background import CleanupContext, leader_only
from node.web.http import Route
from node.workflows import records as workflow_records
from node.workflows import routes as workflow_routes


@dataclass(frozen=True)
class Feature:
    """One feature of the node: what it adds to the REST API, to the log's projections and to the running app."""

    name: str
    routes: Sequence[Route] = ()
    projectors: Mapping[str, Projector] = field(default_factory=dict)  # record kind -> its projector
    tables: tuple[str, ...] = ()  # the projection tables its projectors fill (`bbs rebuild` recreates them)
    switches: Mapping[str, Switch] = field(default_factory=dict)  # kind -> switch for records flagged void or back
    screen: Screen | None = None  # a check every record meets before it is appended (projections.Log.screens)
    setup: Callable[[web.Application], None] | None = None  # installs the feature's state on the app being built
    background: tuple[CleanupContext, ...] = ()  # aiohttp cleanup contexts, run while the app runs

    def __post_init__(self) -> None:
        # Read-only copies: what a feature declares cannot grow behind the list's back.
        object.__setattr__(self, "routes", tuple(self.routes))
        object.__setattr__(self, "projectors", MappingProxyType(dict(self.projectors)))
        object.__setattr__(self, "switches", MappingProxyType(dict(self.switches)))


FEATURES: tuple[Feature, ...] = (
    Feature(
        "substrate",  # entries, links, reads and search, subscriptions and the inbox, agents, node info
        routes=substrate_routes.ROUTES,
        projectors=projections.SUBSTRATE_PROJECTORS,
        tables=projections.SUBSTRATE_TABLES,
        switches=void.SUBSTRATE_SWITCHES,
        # the index and the store epoch watch it listens to (with the sync store): every process's
        background=(leader_only(background.expiry_sweep), background.search_indexing, background.store_epoch_watch),
    ),
    Feature("feed", routes=feed_routes.ROUTES, setup=feed_routes.install),  # entries in arrival order, long-poll
    Feature("default mode", routes=default_mode_routes.ROUTES),  # governed memory: /v1/default-mode
    Feature("trust", routes=trust_routes.ROUTES, background=(leader_only(background.trust_refresh),)),
    Feature("key-proof sessions", routes=agent_routes.ROUTES),
    Feature(
        "federation",  # peers, digest, peer-signed sync; the scheduler pulling from every peer
        routes=peer_routes.PEER_ROUTES,
        setup=peer_routes.install,
        background=(
            peer_routes.sync_context,
            leader_only(peer_routes.pull_context),
            background.key_fence_settle,
        ),
    ),
    Feature(
        "agent workflows",  # bus, tasks, leases, graph
        routes=workflow_routes.ROUTES,
        projectors=workflow_records.PROJECTORS,
        tables=workflow_records.TABLES,
        switches=workflow_records.SWITCHES,
        background=(leader_only(background.twin_notices), background.lease_fence_check),
    ),
    Feature(
        "push",  # agents' NLIP push endpoints; the dispatcher pushing new notifications to them
        routes=push_routes.ROUTES,
        setup=push_routes.install,
        background=(push_routes.push_context, leader_only(push_routes.push_dispatching)),
    ),
    Feature(
        "spaces",  # signed groups of member agents: who reads what (docs/spaces.md)
        routes=space_routes.ROUTES,
        projectors={
            **dict.fromkeys(space_store.SPACE_KINDS, space_vouched.project_space_record),
            "vouch_page": space_vouched.project_vouch_page,  # a key event's, or a space removal's (listed in it)
        },
        tables=space_store.SPACE_TABLES,
        switches=dict.fromkeys(space_store.SPACE_KINDS, space_vouched.switch_space_record),
    ),
    Feature(
        "redaction",  # a signed redaction takes a record's body off the node; tombstones stay (docs/api.md)
        routes=redaction_routes.ROUTES,
        projectors={"redaction": redaction_effects.project_redaction},
        tables=redaction_store.TABLES,
        screen=redaction_effects.screen_appended,
        switches={"redaction": redaction_effects.switch_redaction},  # a thief's redaction, void by a revocation
        background=(leader_only(redaction_scrub.scrub_context), redaction_scrub.index_scrub_context),
    ),
    Feature(
        "retention", background=(leader_only(retention_job.retention_context),)
    ),  # opt-in deletion of node-local rows
    Feature("nlip", setup=nlip_endpoint.install),  # POST /nlip: the six primitives for NLIP clients
)


def all_routes() -> list[Route]:
    """Every REST route of the node, feature by feature in the order of `FEATURES`."""
    return [route for feature in FEATURES for route in feature.routes]


def joined(features: Sequence[Feature]) -> Log:
    """The log of these features: every projector (a record kind projected by two features is refused) and
    every projection table, feature by feature."""
    projectors: dict[str, Projector] = {}
    for feature in features:
        twice = sorted(set(feature.projectors) & set(projectors))
        if twice:
            raise ValueError(f"{feature.name} projects {', '.join(twice)}, which another feature projects")
        projectors.update(feature.projectors)
    switches = {kind: switch for feature in features for kind, switch in feature.switches.items()}
    screens = tuple(feature.screen for feature in features if feature.screen is not None)
    return Log(projectors, tuple(table for feature in features for table in feature.tables), switches, screens)


LOG: Log = joined(FEATURES)  # the node's log: its record kinds' projectors and its projection tables
