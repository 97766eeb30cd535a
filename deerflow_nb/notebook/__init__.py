"""What a notebook user meets: the ``%%agent`` and ``%memory`` magics, their views, the
memory panel, and the per-shell session that owns one ``Memory``."""
