"""The log and the database: the writer thread, migrations, projections, and what a record passes on its way in."""
