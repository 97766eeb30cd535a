"""journal.db: the connection, the append-only migrations and the tables. The only
module group that speaks SQL; everything above reads and writes through it."""
