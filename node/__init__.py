"""One peer of the federation: store, service layer, REST API and the `bbs` CLI."""

__version__ = "0.1.0"
