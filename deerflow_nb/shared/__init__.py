"""A project's memory shared by a team or a class, on PostgreSQL (issue 39).

``team.py`` sets the server up (schema, policies, members), ``exchange.py`` publishes a
home's change sets from its outbox and pulls the team's; ``store.py`` is the store
contract on the server (a project's current facts and summary, kept by every publish);
``connect.py`` makes the connection and its one-line errors. The only package that
speaks PostgreSQL: psycopg is imported inside functions, so nothing here loads it before
a shared project is used.
"""
