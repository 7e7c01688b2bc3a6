"""Write a nostr-relay config: its shipped defaults with our database path, port and quiet logs.

Run with the nostr-relay virtualenv's python: `python nostr_config.py OUT_FILE DB_FILE PORT`.
"""

import os
import sys

import nostr_relay
import yaml

out, db_file, port = sys.argv[1], sys.argv[2], sys.argv[3]
with open(os.path.join(os.path.dirname(nostr_relay.__file__), "config.yaml"), encoding="utf-8") as fh:
    config = yaml.safe_load(fh)
config["storage"]["sqlalchemy.url"] = f"sqlite+aiosqlite:///{db_file}"
config["gunicorn"]["bind"] = f"127.0.0.1:{port}"
config["gunicorn"]["loglevel"] = "warning"
with open(out, "w", encoding="utf-8") as fh:
    yaml.safe_dump(config, fh)
