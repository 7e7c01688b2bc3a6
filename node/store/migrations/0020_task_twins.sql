-- Tasks whose home node changed when an earlier first declaration arrived (node/workflows/twins.py): the node
-- checks each whether it had acted as that task's home (granted a lease on it), and if so tells the holders and
-- the declarer of its now later twin. Node-local, never synced; a key leaves once it is checked.
CREATE TABLE task_home_moves (
    task_key TEXT PRIMARY KEY
) WITHOUT ROWID;
