"""Typed keys for objects stored on the aiohttp application."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from node.service import Node

NODE: web.AppKey[Node] = web.AppKey("node")
